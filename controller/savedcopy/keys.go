package savedcopy

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"strings"

	"filippo.io/age"
	"github.com/tetherhq/tether/protocol"
)

// LoadIdentity reads the age identity snapshots are encrypted to, generating it (0600) on first
// use. Losing this file loses every encrypted snapshot: it belongs in the operator's backups.
func LoadIdentity(path string) (*age.X25519Identity, error) {
	b, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		id, err := age.GenerateX25519Identity()
		if err != nil {
			return nil, err
		}
		f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
		if err != nil {
			return nil, err
		}
		if _, err := fmt.Fprintf(f, "# tether snapshot key, public key: %s\n%s\n", id.Recipient(), id); err != nil {
			f.Close()
			return nil, err
		}
		if err := f.Sync(); err != nil {
			f.Close()
			return nil, err
		}
		return id, f.Close()
	}
	if err != nil {
		return nil, err
	}
	ids, err := age.ParseIdentities(strings.NewReader(string(b)))
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	for _, id := range ids {
		if x, ok := id.(*age.X25519Identity); ok {
			return x, nil
		}
	}
	return nil, fmt.Errorf("%s holds no X25519 identity", path)
}

// EncryptionFor says whether snapshots are encrypted, from the --encrypt-snapshots setting
// ("auto": when the blob store is S3) and the blob store's URL.
func EncryptionFor(setting, blobsURL string) (bool, error) {
	switch setting {
	case "", "auto":
		return strings.HasPrefix(blobsURL, "s3://"), nil
	case "true":
		return true, nil
	case "false":
		return false, nil
	}
	return false, protocol.Errorf(protocol.CodeInvalidArgument, "--encrypt-snapshots %q: want auto, true or false", setting)
}
