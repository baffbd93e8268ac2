package gitsource

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"github.com/tetherhq/tether/protocol"
)

// Remove deletes dir so that a crash never leaves a half-deleted tree at dir: it is renamed to
// dir+".deleting-<random>" first, then removed. A missing dir is not an error.
func Remove(dir string) error {
	doomed := dir + ".deleting-" + randHex()
	if err := os.Rename(dir, doomed); err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return nil
		}
		return protocol.Errorf(protocol.CodeInternal, "remove %s: %v", dir, err)
	}
	if err := os.RemoveAll(doomed); err != nil {
		return protocol.Errorf(protocol.CodeInternal, "remove %s: %v", dir, err)
	}
	return nil
}

// RemoveLeftovers removes every "<name>.tmp-<random>" and "<name>.deleting-<random>" entry in
// parent that a crashed Ensure or Remove left behind. It must not run while an Ensure under parent
// is in progress (call it at controller start).
func RemoveLeftovers(parent string) error { return removeLeftovers(parent, "") }

func removeLeftovers(parent, base string) error {
	entries, err := os.ReadDir(parent)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	} else if err != nil {
		return protocol.Errorf(protocol.CodeInternal, "leftovers in %s: %v", parent, err)
	}
	for _, e := range entries {
		name := e.Name()
		for _, mark := range []string{".tmp-", ".deleting-"} {
			i := strings.LastIndex(name, mark)
			if i <= 0 || (base != "" && name[:i] != base) || !isRandHex(name[i+len(mark):]) {
				continue
			}
			if err := os.RemoveAll(filepath.Join(parent, name)); err != nil {
				return protocol.Errorf(protocol.CodeInternal, "remove leftover %s: %v", name, err)
			}
		}
	}
	return nil
}
