package exec

import (
	"fmt"
	"runtime"
	"syscall"
	"unsafe"
)

// The seccomp filter of an isolated run refuses two things. The kernel's
// keyrings (add_key, request_key, keyctl): a key a run adds to its uid's
// keyring outlives the run, in kernel memory until reboot, where a later
// run could read it if its mode allowed, and every run's new uid would
// leave some behind. And a new user namespace: inside one, an unprivileged
// process holds every capability over namespaces it then creates (mounts of
// its own, a network of its own), a kernel surface much larger than a run
// needs and where most local privilege escalations of recent years were
// found. Pods get both from the runtime's default seccomp profile.
//
// The alternative, a user namespace per run with user.max_user_namespaces
// set to 0 inside it, needs a user namespace we would not otherwise make
// (serve is root, and the per-run uid gives the separation), and its limit
// can be raised again by whoever holds CAP_SYS_RESOURCE in it. A filter is
// inherited by every descendant and can never be removed.
//
// clone3 passes its flags in memory, which a filter cannot read, so clone3
// fails with ENOSYS and the C library falls back to clone, whose flags it
// can. Foreign system-call ABIs (x32, 32-bit) fail likewise; python3 never
// uses them.

// seccomp constants from <linux/seccomp.h>, <linux/filter.h> and
// <linux/audit.h>.
const (
	seccompRetAllow = 0x7fff0000
	seccompRetErrno = 0x00050000
	cloneNewUser    = syscall.CLONE_NEWUSER
	x32SyscallBit   = 0x40000000
	bpfLdWAbs       = 0x20 // BPF_LD | BPF_W | BPF_ABS
	bpfJeqK         = 0x15 // BPF_JMP | BPF_JEQ | BPF_K
	bpfJgeK         = 0x35 // BPF_JMP | BPF_JGE | BPF_K
	bpfJsetK        = 0x45 // BPF_JMP | BPF_JSET | BPF_K
	bpfRetK         = 0x06 // BPF_RET | BPF_K
	// Offsets in struct seccomp_data: the call's number, the ABI, and the
	// low 32 bits of the first argument (little-endian).
	offNr   = 0
	offArch = 4
	offArg0 = 16
)

// seccompArch is the audit ABI and the numbers of the calls the filter
// looks at on this architecture.
type seccompArch struct {
	audit                      uint32
	clone, unshare, clone3     uint32
	addKey, requestKey, keyctl uint32
}

func thisArch() (seccompArch, error) {
	switch runtime.GOARCH {
	case "amd64":
		return seccompArch{audit: 0xc000003e, clone: 56, unshare: 272, clone3: 435, addKey: 248, requestKey: 249, keyctl: 250}, nil
	case "arm64":
		return seccompArch{audit: 0xc00000b7, clone: 220, unshare: 97, clone3: 435, addKey: 217, requestKey: 218, keyctl: 219}, nil
	}
	return seccompArch{}, fmt.Errorf("seccomp: no filter for %s", runtime.GOARCH)
}

// SeccompSupported reports whether this architecture has the filter.
func SeccompSupported() error {
	_, err := thisArch()
	return err
}

// runFilter is the BPF program described above.
func runFilter(a seccompArch) []syscall.SockFilter {
	stmt := func(code uint16, k uint32) syscall.SockFilter { return syscall.SockFilter{Code: code, K: k} }
	jump := func(code uint16, k uint32, jt, jf uint8) syscall.SockFilter {
		return syscall.SockFilter{Code: code, K: k, Jt: jt, Jf: jf}
	}
	enosys := seccompRetErrno | uint32(syscall.ENOSYS)
	eperm := seccompRetErrno | uint32(syscall.EPERM)
	return []syscall.SockFilter{
		/* 0 */ stmt(bpfLdWAbs, offArch),
		/* 1 */ jump(bpfJeqK, a.audit, 1, 0),
		/* 2 */ stmt(bpfRetK, enosys),
		/* 3 */ stmt(bpfLdWAbs, offNr),
		/* 4 */ jump(bpfJgeK, x32SyscallBit, 0, 1),
		/* 5 */ stmt(bpfRetK, enosys),
		/* 6 */ jump(bpfJeqK, a.clone3, 0, 1),
		/* 7 */ stmt(bpfRetK, enosys),
		/* 8 */ jump(bpfJeqK, a.addKey, 6, 0),
		/* 9 */ jump(bpfJeqK, a.requestKey, 5, 0),
		/* 10 */ jump(bpfJeqK, a.keyctl, 4, 0),
		/* 11 */ jump(bpfJeqK, a.clone, 1, 0),
		/* 12 */ jump(bpfJeqK, a.unshare, 0, 3),
		/* 13 */ stmt(bpfLdWAbs, offArg0),
		/* 14 */ jump(bpfJsetK, cloneNewUser, 0, 1),
		/* 15 */ stmt(bpfRetK, eperm),
		/* 16 */ stmt(bpfRetK, seccompRetAllow),
	}
}

// installSeccomp applies the filter to this thread, which must already have
// no_new_privs (an unprivileged process may not install one otherwise).
func installSeccomp() error {
	a, err := thisArch()
	if err != nil {
		return err
	}
	prog := runFilter(a)
	fprog := syscall.SockFprog{Len: uint16(len(prog)), Filter: &prog[0]}
	if _, _, e := syscall.RawSyscall(syscall.SYS_PRCTL, prSetSeccomp, seccompModeFilter, uintptr(unsafe.Pointer(&fprog))); e != 0 {
		return fmt.Errorf("install seccomp filter: %w", e)
	}
	runtime.KeepAlive(prog)
	return nil
}
