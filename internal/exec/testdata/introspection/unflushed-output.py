import sys
sys.stdout.write('no newline')
sys.stderr.write('nor here')
print('end', end='', file=sys.stdout)
