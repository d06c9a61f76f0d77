package chqemu

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"path/filepath"
	"sort"
	"strings"
)

// An InitramfsFile is one regular file of the initramfs.
type InitramfsFile struct {
	// Path is the file's path in the guest (absolute).
	Path string
	// Source is the host file copied in ("" = Data).
	Source string
	Data   []byte
	Mode   os.FileMode
}

// Initramfs describes a guest's initramfs.
type Initramfs struct {
	// Init is the host path of the static binary run as /init.
	Init string
	// Files are more files (the worker binary, …).
	Files []InitramfsFile
	// Modules are kernel modules (host paths, in load order): copied to
	// /lib/modules/<name> and listed, in order, in ModulesList.
	Modules []string
}

// ModulesList is the initramfs file listing the modules to load, one guest
// path a line, in order.
const ModulesList = "/etc/norsk-modules"

// BuildInitramfs writes the initramfs as a newc cpio archive (what the
// kernel unpacks into its rootfs): the directories, /init, the files, the
// modules and their list.
func BuildInitramfs(w io.Writer, spec Initramfs) error {
	if spec.Init == "" {
		return errors.New("initramfs: no init")
	}
	files := []InitramfsFile{{Path: "/init", Source: spec.Init, Mode: 0o755}}
	files = append(files, spec.Files...)
	var list strings.Builder
	for _, m := range spec.Modules {
		p := "/lib/modules/" + filepath.Base(m)
		files = append(files, InitramfsFile{Path: p, Source: m, Mode: 0o644})
		list.WriteString(p + "\n")
	}
	files = append(files, InitramfsFile{Path: ModulesList, Data: []byte(list.String()), Mode: 0o644})
	dirs := map[string]bool{}
	for _, d := range []string{"/dev", "/proc", "/sys", "/tmp", "/run", "/var", "/etc"} {
		dirs[d] = true
	}
	for _, f := range files {
		if !path.IsAbs(f.Path) {
			return fmt.Errorf("initramfs: %q is not an absolute path", f.Path)
		}
		for d := path.Dir(f.Path); d != "/"; d = path.Dir(d) {
			dirs[d] = true
		}
	}
	sorted := make([]string, 0, len(dirs))
	for d := range dirs {
		sorted = append(sorted, d)
	}
	sort.Strings(sorted) // parents before children
	bw := bufio.NewWriter(w)
	cw := &cpioWriter{w: bw}
	for _, d := range sorted {
		if err := cw.entry(d, 0o040755, nil); err != nil {
			return err
		}
	}
	// The console the kernel opens for init before devtmpfs is mounted.
	if err := cw.node("/dev/console", 0o020600, 5, 1); err != nil {
		return err
	}
	for _, f := range files {
		data := f.Data
		if f.Source != "" {
			b, err := os.ReadFile(f.Source)
			if err != nil {
				return fmt.Errorf("initramfs: %w", err)
			}
			data = b
		}
		mode := f.Mode
		if mode == 0 {
			mode = 0o644
		}
		if err := cw.entry(f.Path, 0o100000|uint32(mode.Perm()), data); err != nil {
			return err
		}
	}
	if err := cw.entry("TRAILER!!!", 0, nil); err != nil {
		return err
	}
	return bw.Flush()
}

// WriteInitramfs builds the initramfs into the file path.
func WriteInitramfs(file string, spec Initramfs) error {
	f, err := os.OpenFile(file, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o644)
	if err != nil {
		return err
	}
	if err := BuildInitramfs(f, spec); err != nil {
		_ = f.Close()
		return err
	}
	return f.Close()
}

// cpioWriter writes newc ("070701") entries.
type cpioWriter struct {
	w   io.Writer
	ino uint32
	off int64
}

func (c *cpioWriter) entry(name string, mode uint32, data []byte) error {
	return c.write(name, mode, 0, 0, data)
}

func (c *cpioWriter) node(name string, mode, major, minor uint32) error {
	return c.write(name, mode, major, minor, nil)
}

func (c *cpioWriter) write(name string, mode, rmajor, rminor uint32, data []byte) error {
	name = strings.TrimPrefix(name, "/")
	c.ino++
	nlink := uint32(1)
	if mode&0o170000 == 0o040000 {
		nlink = 2
	}
	ino := c.ino
	if name == "TRAILER!!!" {
		ino = 0
	}
	hdr := fmt.Sprintf("070701%08X%08X%08X%08X%08X%08X%08X%08X%08X%08X%08X%08X%08X",
		ino, mode, 0, 0, nlink, 0, len(data), 0, 0, rmajor, rminor, len(name)+1, 0)
	if err := c.put([]byte(hdr)); err != nil {
		return err
	}
	if err := c.put(append([]byte(name), 0)); err != nil {
		return err
	}
	if err := c.pad(); err != nil {
		return err
	}
	if err := c.put(data); err != nil {
		return err
	}
	return c.pad()
}

func (c *cpioWriter) put(b []byte) error {
	n, err := c.w.Write(b)
	c.off += int64(n)
	return err
}

func (c *cpioWriter) pad() error {
	if r := c.off % 4; r != 0 {
		return c.put(make([]byte, 4-r))
	}
	return nil
}

// KernelRelease is the release a Debian kernel image's file name carries
// (/boot/vmlinuz-6.1.0-18-amd64 → 6.1.0-18-amd64).
func KernelRelease(kernel string) (string, error) {
	rel, ok := strings.CutPrefix(filepath.Base(kernel), "vmlinuz-")
	if !ok || rel == "" {
		return "", fmt.Errorf("kernel %s: want a file named vmlinuz-<release>", kernel)
	}
	return rel, nil
}

// GuestModules are the modules the microvm machine's devices need from a
// distribution kernel that builds them as modules (Debian's): the
// virtio-mmio transport, the block and network devices.
var GuestModules = []string{"virtio_mmio", "virtio_blk", "virtio_net"}

// ModulesFor resolves the named modules of the kernel release under
// modRoot (/lib/modules) with their dependencies (modules.dep) into load
// order: every module after the ones it depends on. A module built into
// the kernel (modules.builtin) needs nothing.
func ModulesFor(modRoot, release string, names ...string) ([]string, error) {
	dir := filepath.Join(modRoot, release)
	deps, err := os.ReadFile(filepath.Join(dir, "modules.dep"))
	if err != nil {
		return nil, fmt.Errorf("kernel modules: %w", err)
	}
	byName := map[string][]string{} // module name -> [its path, deps...]
	for _, line := range strings.Split(string(deps), "\n") {
		mod, rest, ok := strings.Cut(line, ":")
		if !ok {
			continue
		}
		entry := append([]string{mod}, strings.Fields(rest)...)
		byName[modName(mod)] = entry
	}
	builtin := map[string]bool{}
	if b, err := os.ReadFile(filepath.Join(dir, "modules.builtin")); err == nil {
		for _, l := range strings.Fields(string(b)) {
			builtin[modName(l)] = true
		}
	}
	var out []string
	seen := map[string]bool{}
	var visit func(name string, depth int) error
	visit = func(name string, depth int) error {
		if seen[name] || builtin[name] {
			return nil
		}
		if depth > 32 {
			return fmt.Errorf("kernel modules: dependency loop at %s", name)
		}
		entry, ok := byName[name]
		if !ok {
			return fmt.Errorf("kernel modules: %s is not a module of %s (modules.dep)", name, release)
		}
		for _, d := range entry[1:] {
			if err := visit(modName(d), depth+1); err != nil {
				return err
			}
		}
		seen[name] = true
		out = append(out, filepath.Join(dir, entry[0]))
		return nil
	}
	for _, n := range names {
		if err := visit(strings.ReplaceAll(n, "-", "_"), 0); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// modName is a module's name from its path (kernel/net/core/failover.ko
// → failover), with '-' read as '_' as the kernel does.
func modName(p string) string {
	b := filepath.Base(p)
	if i := strings.Index(b, ".ko"); i >= 0 {
		b = b[:i]
	}
	return strings.ReplaceAll(b, "-", "_")
}
