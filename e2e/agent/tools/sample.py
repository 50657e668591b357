"""Plain tool functions, one per behaviour the e2e suite checks."""

import json
import os
import sys
import time
import urllib.request


def add(a, b, scale=1):
    """Returns a value (and prints, which must not corrupt it)."""
    print("adding", a, b)
    return {"sum": (a + b) * scale, "args": [a, b]}


def boom(message):
    """Raises."""
    raise ValueError("boom: " + message)


def chatty(lines):
    """Prints a lot, then returns."""
    for i in range(lines):
        print("line %d %s" % (i, "x" * 100))
    sys.stdout.flush()
    return {"printed": lines}


def fetch(url, timeout=5):
    """Fetches a URL (the internet stand-in); returns status and body."""
    with urllib.request.urlopen(url, timeout=timeout) as r:
        return {"status": r.status, "body": r.read(4096).decode("utf-8", "replace")}


def metadata(url, timeout=3):
    """Tries a URL that must be blocked (the metadata stand-in) and says
    what happened, without raising."""
    start = time.monotonic()
    try:
        with urllib.request.urlopen(url, timeout=timeout) as r:
            return {"reached": True, "status": r.status, "body": r.read(4096).decode("utf-8", "replace")}
    except Exception as e:  # noqa: BLE001 -- any failure is the answer
        return {"reached": False, "error": "%s: %s" % (type(e).__name__, e), "elapsed_s": time.monotonic() - start}


def environ():
    """Returns the whole environment."""
    return dict(os.environ)


def sleeper(seconds):
    """Sleeps past its timeout, leaving a setsid() grandchild that prints a
    heartbeat on stdout for `seconds`: a runner that kills only the leader
    lets it outlive the deadline."""
    t0 = time.time()
    if os.fork() == 0:
        os.setsid()
        if os.fork() == 0:
            while time.time() < t0 + seconds:
                try:
                    os.write(1, ("HB %.3f\n" % (time.time() - t0)).encode())
                except OSError:
                    pass
                time.sleep(0.1)
            os._exit(0)
        os._exit(0)
    time.sleep(seconds)
    return json.dumps({"slept": seconds})
