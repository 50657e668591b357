import threading, time
def work():
    time.sleep(0.1)
    print('thread done')
threading.Thread(target=work).start()
threading.Thread(target=time.sleep, args=(30,), daemon=True).start()
print('main done')
