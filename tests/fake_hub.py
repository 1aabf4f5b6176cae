"""A local fake of the Hugging Face Hub's HTTP API, enough for ``whoami``, ``create_repo`` and
``upload_folder``: a real HTTP server on 127.0.0.1 that ``huggingface_hub`` reaches through
``HF_ENDPOINT`` (so a training script run as a subprocess uploads to it unchanged).

It answers ``GET /api/whoami-v2``, ``POST /api/repos/create``, ``POST /api/validate-yaml``,
``POST /api/models/{repo}/preupload/{rev}`` (every file "regular", i.e. sent inline) and
``POST /api/models/{repo}/commit/{rev}`` (ndjson), the same for ``datasets``, checks the bearer token on each, and keeps what
it received. Anything else is a 404 that is recorded in ``unknown``.
"""

from __future__ import annotations

import base64
import json
import re
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


class FakeHub:
    def __init__(self, token: str, user: str = "alice", orgs=("haggle-org",), role: str = "write"):
        self.token, self.user, self.orgs, self.role = token, user, list(orgs), role
        self.repos: dict[str, dict] = {}  # repo id -> {"private": ..., "files": {path: bytes}, "commits": [...]}
        self.yaml_checked: list[str] = []
        self.requests: list[tuple[str, str]] = []
        self.unknown: list[tuple[str, str]] = []
        self.auth_headers: list[str] = []
        hub = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):  # keep test output quiet
                pass

            def _reply(self, status: int, body: dict) -> None:
                data = json.dumps(body).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def _body(self) -> bytes:
                return self.rfile.read(int(self.headers.get("Content-Length") or 0))

            def _authorized(self) -> bool:
                auth = self.headers.get("Authorization", "")
                hub.auth_headers.append(auth)
                if auth != f"Bearer {hub.token}":
                    self._reply(401, {"error": "Invalid credentials in Authorization header"})
                    return False
                return True

            def do_GET(self):  # noqa: N802
                hub.requests.append(("GET", self.path))
                if self.path.startswith("/api/whoami-v2"):
                    if self._authorized():
                        self._reply(200, {"type": "user", "name": hub.user,
                                          "orgs": [{"name": o} for o in hub.orgs],
                                          "auth": {"type": "access_token", "accessToken": {"role": hub.role}}})
                    return
                hub.unknown.append(("GET", self.path))
                self._reply(404, {"error": "not in the fake"})

            def do_POST(self):  # noqa: N802
                hub.requests.append(("POST", self.path))
                body = self._body()
                path = self.path.split("?")[0]
                if not self._authorized():
                    return
                if path == "/api/repos/create":
                    req = json.loads(body)
                    repo = f"{req.get('organization') or hub.user}/{req['name']}"
                    if repo in hub.repos:
                        return self._reply(409, {"error": "You already created this model repo"})
                    hub.repos[repo] = {"private": req.get("visibility") == "private", "files": {}, "commits": [],
                                       "type": req.get("type", "model")}
                    return self._reply(200, {"url": f"http://{self.headers['Host']}/{repo}", "name": repo})
                if path == "/api/validate-yaml":
                    hub.yaml_checked.append(json.loads(body)["content"])
                    return self._reply(200, {"errors": [], "warnings": []})
                m = re.fullmatch(r"/api/(?:models|datasets)/(.+)/(preupload|commit)/([^/]+)", path)
                if m and m.group(1) in hub.repos:
                    repo = hub.repos[m.group(1)]
                    if m.group(2) == "preupload":
                        files = json.loads(body)["files"]
                        return self._reply(200, {"files": [{"path": f["path"], "uploadMode": "regular",
                                                            "shouldIgnore": False} for f in files]})
                    lines = [json.loads(x) for x in body.splitlines() if x.strip()]
                    for item in lines:
                        if item["key"] == "file":
                            repo["files"][item["value"]["path"]] = base64.b64decode(item["value"]["content"])
                    repo["commits"].append(lines[0]["value"])
                    oid = f"{len(repo['commits']):040x}"
                    return self._reply(200, {"commitUrl": f"http://{self.headers['Host']}/{m.group(1)}/commit/{oid}",
                                             "commitOid": oid, "success": True})
                hub.unknown.append(("POST", self.path))
                self._reply(404, {"error": "not in the fake"})

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def __enter__(self) -> FakeHub:
        self.thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.server.shutdown()
        self.server.server_close()
