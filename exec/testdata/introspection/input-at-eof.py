input()
