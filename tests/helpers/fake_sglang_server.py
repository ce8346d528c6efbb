"""A stand-in for ``python -m sglang.launch_server`` in tests of ``profile-trace --drive``: the
HTTP endpoints the driver uses (/health, /generate with input_ids, /start_profile), answering
like SGLang 0.5.17 (meta_info with completion_tokens, spec_verify_ct, spec_num_correct_drafts,
spec_accept_length). It comes up after --startup-s seconds and exits on SIGINT like the server.
With --fail-start-profile N the first N /start_profile answer 500 "Internal Server Error", as SGLang's
FastAPI app does when its profiler refuses ("Profiling is already in progress", a RuntimeError).
usage: python fake_sglang_server.py --port P [--startup-s S] [--accept K] [--log FILE] [--fail-start-profile N]"""
import argparse
import json
import math
import signal
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--port", type=int, required=True)
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--startup-s", type=float, default=0.5)
    p.add_argument("--accept", type=int, default=2, help="tokens per verify step (bonus included)")
    p.add_argument("--log", default=None)
    p.add_argument("--fail-start-profile", type=int, default=0)
    a = p.parse_args()
    t_up = time.monotonic() + a.startup_s
    events = []

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args):
            pass

        def _send(self, code, body):
            data = body.encode() if isinstance(body, str) else json.dumps(body).encode()
            self.send_response(code)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def do_GET(self):
            if self.path == "/health":
                self._send(200 if time.monotonic() >= t_up else 503, "")
            else:
                self._send(404, "")

        def do_POST(self):
            body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))) or b"{}")
            if time.monotonic() < t_up:
                return self._send(503, "")
            if self.path == "/start_profile":
                events.append({"start_profile": body})
                if sum("start_profile" in e for e in events) <= a.fail_start_profile:
                    return self._send(500, "Internal Server Error")
                return self._send(200, "Start profiling.\n")
            if self.path == "/stop_profile":
                events.append({"stop_profile": body})
                return self._send(200, "Stop profiling. This will take some time.\n")
            if self.path == "/generate":
                n = int(body["sampling_params"]["max_new_tokens"])
                verify = math.ceil((n - 1) / a.accept)  # the first token comes from prefill
                events.append({"generate": len(body["input_ids"]), "new": n})
                return self._send(200, {"output_ids": list(range(n)), "meta_info": {
                    "prompt_tokens": len(body["input_ids"]), "completion_tokens": n,
                    "spec_verify_ct": verify, "spec_num_correct_drafts": (n - 1) - verify,
                    "spec_accept_length": n / verify}})
            self._send(404, "")

    srv = ThreadingHTTPServer((a.host, a.port), Handler)

    def stop(signum, frame):
        if a.log:
            with open(a.log, "w") as f:
                json.dump({"signal": signum, "events": events}, f)
        threading.Thread(target=srv.shutdown, daemon=True).start()

    signal.signal(signal.SIGINT, stop)
    signal.signal(signal.SIGTERM, stop)
    srv.serve_forever()
    sys.exit(130)


if __name__ == "__main__":
    main()
