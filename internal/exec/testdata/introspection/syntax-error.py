x = 1
print(
