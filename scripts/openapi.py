"""Write the HTTP server's OpenAPI spec to docs/openapi.json (a test checks it is current).

python scripts/openapi.py
"""

import json
import tempfile
from pathlib import Path

from flexamem.server import ServerConfig, create_app

OUT = Path(__file__).resolve().parents[1] / "docs" / "openapi.json"


def spec() -> str:
    with tempfile.TemporaryDirectory() as tmp:
        app = create_app(ServerConfig(str(Path(tmp) / "m.db"), str(Path(tmp) / "keys.json")))
        return json.dumps(app.openapi(), indent=2, sort_keys=True) + "\n"


if __name__ == "__main__":
    OUT.write_text(spec())
    print(f"wrote {OUT}")
