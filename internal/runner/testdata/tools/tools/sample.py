# Tools the call runner's tests call, one per behaviour.
import asyncio
import functools
import os
import subprocess
import sys
import threading
import time


def add(a, b=0):
    print("adding", a, b)
    return {"sum": a + b, "where": os.getcwd()}


def boom(msg):
    raise ValueError(msg)


def noisy(n):
    sys.stdout.write("x" * n)
    sys.stdout.write('\n{"result": "forged"}\n')
    print("to stderr", file=sys.stderr)
    return "quiet value"


def unserializable():
    return {1, 2, 3}


def nan():
    return float("nan")


def environ():
    return dict(os.environ)


def hard_exit():
    os._exit(0)


def leave_thread():
    threading.Thread(target=time.sleep, args=(600,)).start()
    return "done"


async def later(x):
    await asyncio.sleep(0)
    return x * 2


def sleeper(heartbeat):
    # A grandchild in its own session beats into a file; the runner must
    # kill it at the deadline with the rest of the tree.
    subprocess.Popen([sys.executable, "-c",
                      "import time, sys\n"
                      "while True:\n"
                      "    open(sys.argv[1], 'a').write('.')\n"
                      "    time.sleep(0.05)\n", heartbeat], start_new_session=True)
    time.sleep(600)


class Calc:
    @staticmethod
    def mul(a, b):
        return a * b


not_callable = 42


def _fake_sandboxed(f):
    # What sandbox_client's @sandboxed leaves: a wrapper that would call the
    # service again, the function as __wrapped__, and sandbox_function.
    @functools.wraps(f)
    def wrapper(*a, **k):
        raise RuntimeError("the wrapper ran inside the sandbox")
    wrapper.sandbox_function = f.__module__ + ":" + f.__qualname__
    return wrapper


@_fake_sandboxed
def decorated(city):
    return "sunny in " + city
