//go:build !linux

package devenv

import "syscall"

// setDeathSignal does nothing: only Linux has a parent-death signal. Ctrl-C
// and SIGTERM still stop the helpers; a billingd killed with SIGKILL leaves
// them running (stop PostgreSQL with pg_ctl stop -D and the data directory the welcome text names).
func setDeathSignal(*syscall.SysProcAttr, syscall.Signal) {}
