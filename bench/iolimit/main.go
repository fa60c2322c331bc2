// Command iolimit measures what a batch writer on the same disk does to a latency-sensitive reader, and
// what beClass.blkioQOS's write cap (resource/blkio, the keeper tandem-proxy runs on the BE parent)
// gives back: the reader does small random direct reads, open loop, at -rate per second from a root
// thread, as an LS service's storage reads; the writer, a thread in a BE cgroup of the bench's own
// (/tdm-iolimit-<pid>/besteffort in the blkio hierarchy), writes 1 MiB blocks as fast as the disk takes
// them, with O_DIRECT or through the page cache. Each cell runs -duration; the cells run in -rounds
// rounds, and the reader's ratios are to solo (no writer) in the same round.
//
// Latency is from each read's intended start (open loop: a read that waits behind a stalled one counts
// the wait). cgroup v1 attributes a thread's direct writes to its cgroup, but writeback of its buffered
// writes happens in the kernel's flusher threads, outside it: the buffered cells show what a cap cannot
// reach on v1 (cgroup v2 attributes writeback to the writer's cgroup).
//
//	go run ./bench/iolimit [-duration 15s] [-rounds 2] [-rate 200] [-write-cap 20971520]
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"math/rand/v2"
	"os"
	"os/signal"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/tandemkit/tandem/bench/internal/figures"
	"github.com/tandemkit/tandem/bench/internal/runctx"
	"github.com/tandemkit/tandem/resource/blkio"
)

// cell is one configuration of the writer.
type cell struct {
	name string
	// write: a writer runs; direct: with O_DIRECT, else through the page cache.
	write, direct bool
	// capped puts beClass.blkioQOS's writeBPS on the BE cgroup.
	capped bool
}

var cells = []cell{
	{name: "solo"},
	{name: "be-direct", write: true, direct: true},
	{name: "be-direct-capped", write: true, direct: true, capped: true},
	{name: "be-buffered", write: true},
	{name: "be-buffered-capped", write: true, capped: true},
}

const (
	readSize  = 4 << 10
	readSpan  = 256 << 20
	writeSize = 1 << 20
	writeSpan = 1 << 30
)

func main() {
	duration := flag.Duration("duration", 15*time.Second, "how long each cell runs")
	rounds := flag.Int("rounds", 2, "rounds of all cells, interleaved")
	rate := flag.Int("rate", 200, "reads per second the reader starts (open loop)")
	writeCap := flag.Int64("write-cap", 20<<20, "beClass.blkioQOS writeBPS for the capped cells, bytes/s")
	dir := flag.String("dir", "/var/tmp", "directory, on the disk to measure, for the bench's files")
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	runctx.Exit(ctx, run(ctx, *duration, *rounds, *rate, *writeCap, *dir))
}

// result is one cell's figures.
type result struct {
	lat     []time.Duration
	written int64
	elapsed time.Duration
}

func run(ctx context.Context, duration time.Duration, rounds, rate int, writeCap int64, dir string) (err error) {
	if os.Geteuid() != 0 {
		return errors.New("iolimit makes blkio cgroups and must run as root")
	}
	hier := "/sys/fs/cgroup/blkio"
	if _, err := os.Stat(filepath.Join(hier, "blkio.throttle.write_bps_device")); err != nil {
		return fmt.Errorf("iolimit runs on a cgroup v1 blkio hierarchy with throttling (%w)", err)
	}
	work, err := os.MkdirTemp(dir, "tdm-iolimit-")
	if err != nil {
		return err
	}
	defer func() {
		if rerr := os.RemoveAll(work); rerr != nil && err == nil {
			err = fmt.Errorf("remove the bench's directory %s: %w", work, rerr)
		}
	}()
	dev, disk, err := diskOf(work)
	if err != nil {
		return err
	}
	root := filepath.Join(hier, fmt.Sprintf("tdm-iolimit-%d", os.Getpid()))
	be := filepath.Join(root, "besteffort")
	if err := os.MkdirAll(be, 0o755); err != nil {
		return err
	}
	defer func() {
		for _, d := range []string{be, root} {
			if rerr := os.Remove(d); rerr != nil && err == nil {
				err = fmt.Errorf("remove the bench's cgroup %s: %w", d, rerr)
			}
		}
	}()
	keeper, err := blkio.New(blkio.Config{Dir: be, Version: 1, SysRoot: "/sys", Record: filepath.Join(work, "record.json")})
	if err != nil {
		return err
	}
	defer func() {
		if rerr := keeper.Restore(context.WithoutCancel(ctx)); rerr != nil && err == nil {
			err = fmt.Errorf("restore the disk's blkio settings: %w", rerr)
		}
	}()
	readFile := filepath.Join(work, "read")
	if err := fill(readFile, readSpan); err != nil {
		return err
	}
	fmt.Printf("iolimit: disk %s (%s), reads %d/s of 4 KiB O_DIRECT over %d MiB, writer 1 MiB blocks, cap writeBPS %d MiB/s, %s per cell, %d rounds; load %s\nmachine: %s\n",
		disk, dev, rate, readSpan>>20, writeCap>>20, duration, rounds, figures.LoadAverage(), figures.ReadMachine().Line())
	all := map[string][]result{}
	for r := 0; r < rounds; r++ {
		for _, c := range cells {
			want := blkio.Want{}
			if c.capped {
				want = blkio.Want{Enable: true, Blocks: []blkio.Block{{Name: disk, Type: blkio.TypeDevice, Limits: blkio.Limits{WriteBPS: writeCap}}}}
			}
			if _, err := keeper.Apply(ctx, want); err != nil {
				return err
			}
			res, err := runCell(ctx, c, duration, rate, readFile, filepath.Join(work, "write"), be)
			if err != nil {
				return fmt.Errorf("round %d, %s: %w", r+1, c.name, err)
			}
			all[c.name] = append(all[c.name], res)
			// The page cache a buffered cell left dirty is written out before the next cell starts.
			unix.Sync()
		}
	}
	report(all, rounds, writeCap)
	return nil
}

// runCell runs the reader, and the writer when the cell has one, for d.
func runCell(ctx context.Context, c cell, d time.Duration, rate int, readFile, writeFile, be string) (result, error) {
	ctx, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	var written atomic.Int64
	var wg sync.WaitGroup
	var werr error
	if c.write {
		wg.Add(1)
		go func() {
			defer wg.Done()
			werr = writer(ctx, c.direct, writeFile, be, &written)
		}()
	}
	start := time.Now()
	lat, rerr := reader(ctx, rate, readFile)
	elapsed := time.Since(start)
	wg.Wait()
	_ = os.Remove(writeFile)
	return result{lat: lat, written: written.Load(), elapsed: elapsed}, errors.Join(rerr, werr)
}

// reader starts a 4 KiB direct read at a random aligned offset every 1/rate s, on 8 threads, and
// returns each read's latency from its intended start.
func reader(ctx context.Context, rate int, path string) ([]time.Duration, error) {
	fd, err := unix.Open(path, unix.O_RDONLY|unix.O_DIRECT, 0)
	if err != nil {
		return nil, fmt.Errorf("open %s with O_DIRECT: %w", path, err)
	}
	// Only read: closing it reports nothing the bench could act on.
	defer func() { _ = unix.Close(fd) }()
	due := make(chan time.Time, 4096)
	var mu sync.Mutex
	var lat []time.Duration
	var wg sync.WaitGroup
	var rerr error
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			buf := aligned(readSize)
			for t := range due {
				off := rand.Int64N(readSpan/readSize) * readSize
				if _, err := unix.Pread(fd, buf, off); err != nil {
					mu.Lock()
					rerr = err
					mu.Unlock()
					continue
				}
				l := time.Since(t)
				mu.Lock()
				lat = append(lat, l)
				mu.Unlock()
			}
		}()
	}
	start, interval := time.Now(), time.Second/time.Duration(rate)
	for i := 0; ; i++ {
		at := start.Add(time.Duration(i) * interval)
		if ctx.Err() != nil {
			break
		}
		if w := time.Until(at); w > 0 {
			select {
			case <-ctx.Done():
			case <-time.After(w):
			}
			if ctx.Err() != nil {
				break
			}
		}
		due <- at
	}
	close(due)
	wg.Wait()
	return lat, rerr
}

// writer writes 1 MiB blocks over writeSpan, from a thread it moves into the BE cgroup (cgroup v1 takes a
// thread's id in tasks), until ctx ends.
func writer(ctx context.Context, direct bool, path, be string, written *atomic.Int64) (err error) {
	// The thread stays locked and dies with the goroutine: it never goes back to the runtime's pool in
	// the BE cgroup, and the cgroup is empty once this returns.
	runtime.LockOSThread()
	if err := os.WriteFile(filepath.Join(be, "tasks"), []byte(strconv.Itoa(unix.Gettid())), 0o644); err != nil {
		return fmt.Errorf("move the writer into %s: %w", be, err)
	}
	flags := unix.O_WRONLY | unix.O_CREAT
	if direct {
		flags |= unix.O_DIRECT
	}
	fd, err := unix.Open(path, flags, 0o600)
	if err != nil {
		return fmt.Errorf("open %s: %w", path, err)
	}
	defer func() {
		if cerr := unix.Close(fd); cerr != nil && err == nil {
			err = fmt.Errorf("close %s: %w", path, cerr)
		}
	}()
	buf := aligned(writeSize)
	for i := range buf {
		buf[i] = byte(i)
	}
	var off int64
	for ctx.Err() == nil {
		n, err := unix.Pwrite(fd, buf, off)
		if err != nil {
			return fmt.Errorf("write %s: %w", path, err)
		}
		written.Add(int64(n))
		off = (off + writeSize) % writeSpan
	}
	return nil
}

// aligned returns n bytes aligned for O_DIRECT.
func aligned(n int) []byte {
	const align = 4096
	b := make([]byte, n+align)
	shift := (align - int(uintptr(unsafe.Pointer(&b[0]))%align)) % align
	return b[shift : shift+n]
}

// fill writes size bytes of data to path and syncs it.
func fill(path string, size int64) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	buf := make([]byte, 1<<20)
	for i := range buf {
		buf[i] = byte(i * 7)
	}
	for w := int64(0); w < size; w += int64(len(buf)) {
		if _, err := f.Write(buf); err != nil {
			return errors.Join(err, f.Close())
		}
	}
	if err := f.Sync(); err != nil {
		return errors.Join(err, f.Close())
	}
	return f.Close()
}

// diskOf returns the device number and /dev name of the disk dir is on (a partition's disk).
func diskOf(dir string) (string, string, error) {
	var st unix.Stat_t
	if err := unix.Stat(dir, &st); err != nil {
		return "", "", err
	}
	real, err := filepath.EvalSymlinks(fmt.Sprintf("/sys/dev/block/%d:%d", unix.Major(st.Dev), unix.Minor(st.Dev)))
	if err != nil {
		return "", "", fmt.Errorf("%s is not on a block device: %w", dir, err)
	}
	if _, err := os.Stat(filepath.Join(real, "partition")); err == nil {
		real = filepath.Dir(real)
	}
	b, err := os.ReadFile(filepath.Join(real, "dev"))
	if err != nil {
		return "", "", err
	}
	return string(b[:len(b)-1]), "/dev/" + filepath.Base(real), nil
}

// report prints, per cell and round, the reader's percentiles and their ratio to solo in the same round,
// and the writer's rate.
func report(all map[string][]result, rounds int, writeCap int64) {
	fmt.Printf("%-20s %5s %8s %9s %9s %9s %9s %11s %11s %10s\n", "cell", "round", "reads", "p50", "p99", "p99.9", "max", "p99/solo", "p99.9/solo", "BE MiB/s")
	for _, c := range cells {
		for r := 0; r < rounds && r < len(all[c.name]); r++ {
			res, solo := all[c.name][r], all["solo"][r]
			p := percentiles(res.lat)
			s := percentiles(solo.lat)
			rate := "-"
			if c.write {
				rate = fmt.Sprintf("%.1f", float64(res.written)/res.elapsed.Seconds()/(1<<20))
			}
			fmt.Printf("%-20s %5d %8d %9s %9s %9s %9s %10.2fx %10.2fx %10s\n", c.name, r+1, len(res.lat),
				round(p[0]), round(p[1]), round(p[2]), round(p[3]), figures.Ratio(float64(p[1]), float64(s[1])), figures.Ratio(float64(p[2]), float64(s[2])), rate)
		}
	}
	fmt.Printf("the capped cells hold BE at writeBPS %d MiB/s (beClass.blkioQOS); on cgroup v1 buffered writes reach the disk through writeback outside the BE cgroup\n", writeCap>>20)
}

// percentiles returns p50, p99, p99.9 and the max.
func percentiles(ds []time.Duration) [4]time.Duration {
	s := slices.Clone(ds)
	slices.Sort(s)
	if len(s) == 0 {
		return [4]time.Duration{}
	}
	return [4]time.Duration{figures.Nearest(s, 0.50), figures.Nearest(s, 0.99), figures.Nearest(s, 0.999), s[len(s)-1]}
}

func round(d time.Duration) string {
	switch {
	case d >= time.Second:
		return d.Round(time.Millisecond).String()
	case d >= time.Millisecond:
		return d.Round(10 * time.Microsecond).String()
	}
	return d.Round(time.Microsecond).String()
}
