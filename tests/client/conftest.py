from tests.server.conftest import server  # noqa: F401  (the real server of the HTTP tests)
