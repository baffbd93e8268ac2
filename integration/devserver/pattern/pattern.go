// Package pattern is the byte pattern the devserver's /bytes serves, shared with the tests and
// the bench that check a download byte for byte. Byte i is i*7 + i/4093 (mod 256): not periodic
// in any small power of two, so a dropped or repeated chunk shows.
package pattern

import (
	"crypto/sha256"
	"encoding/hex"
)

// Byte is byte i of the pattern.
func Byte(i int64) byte { return byte(i*7 + i/4093) }

// Fill writes the pattern from offset off into buf.
func Fill(buf []byte, off int64) {
	for j := range buf {
		buf[j] = Byte(off + int64(j))
	}
}

// SHA256 is the hex SHA-256 of the pattern's first n bytes.
func SHA256(n int64) string {
	h := sha256.New()
	buf := make([]byte, 64<<10)
	for off := int64(0); off < n; {
		k := min(int64(len(buf)), n-off)
		Fill(buf[:k], off)
		h.Write(buf[:k])
		off += k
	}
	return hex.EncodeToString(h.Sum(nil))
}
