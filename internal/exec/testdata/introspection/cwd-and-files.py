import os
print(os.getcwd(), sorted(os.listdir()), open('sub/data.csv').read())
