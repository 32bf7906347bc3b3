package main

import (
	"os/exec"
	"syscall"
)

// setParentDeathSignal makes the kernel kill the child if the benchmark dies
// without running its cleanup (SIGKILL, a crash).
func setParentDeathSignal(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
