import os
# Listing opens a descriptor of its own, closed again before readlink: only
# those still open are the process's.
fds = [fd for fd in sorted(os.listdir('/proc/self/fd'), key=int) if os.path.exists('/proc/self/fd/' + fd)]
print([(fd, os.readlink('/proc/self/fd/' + fd)) for fd in fds])
