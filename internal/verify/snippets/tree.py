# tree: a process tree that tries to outlive the run's timeout. Three
# survivors print "HB <tag> <seconds since start>" every 0.1 s for LIFE
# seconds: a child that ignores SIGTERM (same process group), a grandchild
# that called setsid() (new session, orphaned), and an exec'd heartbeat
# program in a process group of its own. The main process then spins.
# A runner that kills the whole tree at the deadline shows heartbeats only
# from before it; one that kills less either answers late or carries later
# heartbeats (it keeps reading the pipes the survivors hold).
import os
import signal
import subprocess
import sys
import time

LIFE = %(life)f
T0 = time.time()
BEAT = "import os, sys, time\nt0, life, tag, fd = float(sys.argv[1]), float(sys.argv[2]), sys.argv[3], int(sys.argv[4])\n" \
       "while time.time() < t0 + life:\n" \
       "    try:\n        os.write(fd, ('HB %%s %%.3f\\n' %% (tag, time.time() - t0)).encode())\n" \
       "    except OSError:\n        pass\n" \
       "    time.sleep(0.1)\n"


def beat(tag, fd):
    os.execv(sys.executable, [sys.executable, "-c", BEAT, repr(T0), repr(LIFE), tag, str(fd)])


if os.fork() == 0:
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    beat("sigterm-ignorer", 1)  # SIG_IGN survives execve
if os.fork() == 0:
    os.setsid()
    if os.fork() == 0:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        signal.signal(signal.SIGHUP, signal.SIG_IGN)
        beat("setsid-grandchild", 2)
    os._exit(0)
subprocess.Popen([sys.executable, "-c", BEAT, repr(T0), repr(LIFE), "heartbeat", "1"], process_group=0,
                 preexec_fn=lambda: signal.signal(signal.SIGTERM, signal.SIG_IGN))
print("STARTED %%.3f" %% (time.time() - T0), flush=True)
while True:
    pass
