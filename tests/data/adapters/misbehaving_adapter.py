"""A system under test that serves the reference correctly and then misbehaves in one way.

Usage: python misbehaving_adapter.py MODE AFTER
It answers the hello and the first AFTER requests after it properly, then, on the next request:
crash (exits with status 3, after a line on stderr), hang (never answers), garbage (writes a line
that is not JSON), wrong-id (answers with another request's id), bad-reply (a reply without "ok"),
or silent-start (never answers the hello; AFTER is ignored).
"""

import json
import sys
import time

from rmqspec.conform.reference_adapter import ReferenceAdapter

mode, after = sys.argv[1], int(sys.argv[2])
adapter = ReferenceAdapter()
answered = 0
for line in sys.stdin:
    request = json.loads(line)
    if mode == "silent-start" or (request["op"] not in ("hello", "reset") and answered >= after):
        if mode == "crash":
            print("adapter: simulated crash", file=sys.stderr, flush=True)
            sys.exit(3)
        if mode in ("hang", "silent-start"):
            time.sleep(3600)
        if mode == "garbage":
            print("this is not json", flush=True)
            continue
        if mode == "wrong-id":
            print(json.dumps({"id": request["id"] + 1, "ok": True, "result": {}}), flush=True)
            continue
        if mode == "bad-reply":
            print(json.dumps({"id": request["id"], "result": {}}), flush=True)
            continue
    if request["op"] not in ("hello", "reset"):
        answered += 1
    reply = adapter.handle(request["op"], request.get("args", {}))
    reply["id"] = request["id"]
    print(json.dumps(reply), flush=True)
