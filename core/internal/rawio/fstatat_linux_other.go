//go:build linux && !amd64 && !arm64

package rawio

// sysFstatat is 0: on this architecture SameFile takes os.Stat.
const sysFstatat = 0
