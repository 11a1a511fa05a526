package genacesim

import (
	"bytes"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"image"
	"image/color"
	"image/png"
	"strconv"
	"sync"
	"time"
)

// outputSide is the edge of the generated images: small enough to be
// cheap, real enough that a PNG decoder accepts them.
const outputSide = 8

// renderPNG draws a deterministic 8x8 image for (seed, job, index): a
// gradient from two colors taken from a hash, so every output differs and
// re-rendering yields the same bytes (the encoder is deterministic).
func renderPNG(seed int64, jobID string, index int) []byte {
	h := sha256.New()
	var b [8]byte
	binary.BigEndian.PutUint64(b[:], uint64(seed))
	h.Write(b[:])
	h.Write([]byte(jobID))
	binary.BigEndian.PutUint64(b[:], uint64(index))
	h.Write(b[:])
	sum := h.Sum(nil)
	img := image.NewNRGBA(image.Rect(0, 0, outputSide, outputSide))
	for y := 0; y < outputSide; y++ {
		for x := 0; x < outputSide; x++ {
			mix := func(a, c byte) uint8 {
				t := x + y
				return uint8((int(a)*(2*outputSide-2-t) + int(c)*t) / (2*outputSide - 2))
			}
			img.SetNRGBA(x, y, color.NRGBA{mix(sum[0], sum[3]), mix(sum[1], sum[4]), mix(sum[2], sum[5]), 255})
		}
	}
	var buf bytes.Buffer
	if err := pngEncoder.Encode(&buf, img); err != nil {
		panic(fmt.Sprintf("genacesim: png encode: %v", err)) // cannot fail for an in-memory image
	}
	return buf.Bytes()
}

// pngPool reuses the encoder's zlib state: without it every job
// creation allocates most of a megabyte of compressor buffers.
type pngPool struct{ p sync.Pool }

// Get returns a pooled encoder buffer, or nil for a new one.
func (p *pngPool) Get() *png.EncoderBuffer {
	b, _ := p.p.Get().(*png.EncoderBuffer)
	return b
}

// Put returns a buffer to the pool.
func (p *pngPool) Put(b *png.EncoderBuffer) { p.p.Put(b) }

var pngEncoder = &png.Encoder{BufferPool: &pngPool{}}

// signer signs output URLs with an HMAC key derived from the seed, so a
// run with the same seed produces the same URLs at the same clock time.
type signer struct{ key []byte }

func newSigner(seed int64) signer {
	k := sha256.Sum256([]byte("genacesim-url-signing:" + strconv.FormatInt(seed, 10)))
	return signer{key: k[:]}
}

func (s signer) sig(jobID string, index int, expires int64) string {
	m := hmac.New(sha256.New, s.key)
	fmt.Fprintf(m, "%s/%d/%d", jobID, index, expires)
	return hex.EncodeToString(m.Sum(nil))
}

func (s signer) valid(jobID string, index int, expires int64, sig string) bool {
	got, err := hex.DecodeString(sig)
	if err != nil {
		return false
	}
	want, _ := hex.DecodeString(s.sig(jobID, index, expires))
	return hmac.Equal(got, want)
}

// signedPath is the path and query of an output URL valid until now+ttl.
func (s signer) signedPath(jobID string, index int, now time.Time, ttl time.Duration) string {
	exp := now.Add(ttl).Unix()
	return fmt.Sprintf("/files/%s/%d?expires=%d&sig=%s", jobID, index, exp, s.sig(jobID, index, exp))
}
