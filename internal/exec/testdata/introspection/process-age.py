import os
t = int(open('/proc/self/stat').read().rsplit(')', 1)[1].split()[19])
print(round((float(open('/proc/uptime').read().split()[0]) - t / os.sysconf('SC_CLK_TCK')) * 1000))
