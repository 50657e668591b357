import os
print(os.getuid(), os.geteuid(), os.getgid(), os.getgroups())
