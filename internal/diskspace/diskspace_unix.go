//go:build unix

package diskspace

import "golang.org/x/sys/unix"

// Of reports the available and total bytes of dir's file system.
func Of(dir string) (avail, capacity uint64, ok bool) {
	var st unix.Statfs_t
	if err := unix.Statfs(dir, &st); err != nil {
		return 0, 0, false
	}
	return uint64(st.Bavail) * uint64(st.Bsize), uint64(st.Blocks) * uint64(st.Bsize), true
}
