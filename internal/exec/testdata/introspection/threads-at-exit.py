import threading, time
# The interpreter waits at exit for the thread that is not a daemon, and
# not for the daemon. The event orders the two lines whatever the CPU.
main_done = threading.Event()
def work():
    main_done.wait()
    time.sleep(0.1)
    print('thread done')
threading.Thread(target=work).start()
threading.Thread(target=time.sleep, args=(30,), daemon=True).start()
print('main done')
main_done.set()
