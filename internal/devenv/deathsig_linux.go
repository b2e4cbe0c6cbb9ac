package devenv

import "syscall"

// setDeathSignal asks the kernel to send sig to the child when billingd
// dies, however it dies.
func setDeathSignal(attr *syscall.SysProcAttr, sig syscall.Signal) {
	attr.Pdeathsig = sig
}
