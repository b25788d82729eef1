"""A system under test that serves the reference but lacks parts of it, to test how conform treats
an adapter's unsupported operations and result fields.

Usage: python partial_adapter.py [--plant NAME] [--unsupported OP]... [--drop OP:FIELD]... [--declare]
--unsupported OP answers every OP request as unsupported; --drop OP:FIELD leaves FIELD out of OP's
results, declaring it in "unsupportedFields" only with --declare (without it, a client that simply
lacks the field); --plant is serve-reference's.
"""

import argparse
import json
import sys

from rmqspec.conform.reference_adapter import ReferenceAdapter

parser = argparse.ArgumentParser()
parser.add_argument("--plant")
parser.add_argument("--unsupported", action="append", default=[])
parser.add_argument("--drop", action="append", default=[])
parser.add_argument("--declare", action="store_true")
options = parser.parse_args()
dropped: dict[str, list[str]] = {}
for item in options.drop:
    op, _, name = item.partition(":")
    dropped.setdefault(op, []).append(name)
adapter = ReferenceAdapter(plant=options.plant)
for line in sys.stdin:
    request = json.loads(line)
    op = request["op"]
    if op in options.unsupported:
        reply = {"unsupported": {"reason": f"this client has no {op}"}}
    else:
        reply = adapter.handle(op, request.get("args", {}))
        if op in dropped and reply.get("ok"):
            for name in dropped[op]:
                reply["result"].pop(name, None)
            if options.declare:
                reply["unsupportedFields"] = dropped[op]
    reply["id"] = request["id"]
    print(json.dumps(reply), flush=True)
