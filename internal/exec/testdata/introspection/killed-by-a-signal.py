import os, signal
print('before', flush=True)
os.kill(os.getpid(), signal.SIGTERM)
