#!/usr/bin/env python3
"""watch-rv.py FILE NAME: the resourceVersion of NAME's first ADDED event in FILE, the output of
`kubectl get KIND --watch-only --output-watch-events -o json` (JSON objects one after another, the
last perhaps still being written); prints nothing when there is none yet."""
import json
import sys

text, name = open(sys.argv[1], encoding="utf-8").read(), sys.argv[2]
dec, i = json.JSONDecoder(), 0
while True:
    while i < len(text) and text[i].isspace():
        i += 1
    if i >= len(text):
        break
    try:
        ev, i = dec.raw_decode(text, i)
    except ValueError:
        break  # an event still being written
    meta = ev.get("object", {}).get("metadata", {})
    if ev.get("type") == "ADDED" and meta.get("name") == name:
        print(meta["resourceVersion"])
        break
