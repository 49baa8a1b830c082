package auth

import (
	"crypto/hmac"
	"crypto/sha256"
	"fmt"
	"sync"
	"testing"
)

func reference(key []byte, s string) []byte {
	h := hmac.New(sha256.New, key)
	h.Write([]byte(s))
	return h.Sum(nil)
}

func TestMACMatchesHMAC(t *testing.T) {
	dev := DevAccount().Key
	long := make([]byte, 100) // longer than SHA-256's block: hmac hashes it first
	for i := range long {
		long[i] = byte(i)
	}
	tests := []struct {
		name string
		key  []byte
		sts  []string
	}{
		{"dev key, one string", dev, []string{"GET\n\n\nMon, 01 Jan 2024 00:00:00 GMT\n/devstoreaccount1/t"}},
		{"dev key, repeated and varied (pooled states reset)", dev, []string{"a", "a", "", "b", "a longer string to sign\nwith lines"}},
		{"one-byte key", []byte{7}, []string{"x", "x"}},
		{"key longer than a block", long, []string{"y", "z"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			for _, s := range tt.sts {
				got := mac(tt.key, s)
				if want := reference(tt.key, s); !hmac.Equal(got[:], want) {
					t.Fatalf("mac(%q) = %x, want %x", s, got, want)
				}
			}
		})
	}
}

func TestMACKeyBytesChangedAfterUse(t *testing.T) {
	key := []byte("rotating-key-material")
	_ = mac(key, "s")
	key[0] = 'R' // a caller reusing its buffer must get the new key's MAC
	if got, want := mac(key, "s"), reference(key, "s"); !hmac.Equal(got[:], want) {
		t.Fatalf("mac after the key bytes changed = %x, want %x", got, want)
	}
}

func TestMACBeyondCachedKeys(t *testing.T) {
	for i := 0; i < maxCachedKeys+10; i++ {
		key := []byte(fmt.Sprintf("key-%d", i))
		if got, want := mac(key, "s"), reference(key, "s"); !hmac.Equal(got[:], want) {
			t.Fatalf("key %d: mac = %x, want %x", i, got, want)
		}
	}
	macs.mu.Lock()
	n := len(macs.pools)
	macs.mu.Unlock()
	if n > maxCachedKeys {
		t.Fatalf("cache holds %d keys, bound %d", n, maxCachedKeys)
	}
}

func TestMACConcurrent(t *testing.T) {
	keys := [][]byte{DevAccount().Key, []byte("second")}
	var wg sync.WaitGroup
	errs := make(chan string, 8)
	for g := 0; g < 8; g++ {
		wg.Add(1)
		go func(g int) {
			defer wg.Done()
			for i := 0; i < 500; i++ {
				k := keys[(g+i)%2]
				s := fmt.Sprintf("%d/%d", g, i)
				if got, want := mac(k, s), reference(k, s); !hmac.Equal(got[:], want) {
					errs <- fmt.Sprintf("goroutine %d, %q: %x, want %x", g, s, got, want)
					return
				}
			}
		}(g)
	}
	wg.Wait()
	close(errs)
	for e := range errs {
		t.Fatal(e)
	}
}

// BenchmarkMAC is one SharedKey signature check's HMAC: pooled states
// against hmac.New per call (what every request paid before).
func BenchmarkMAC(b *testing.B) {
	key := DevAccount().Key
	sts := "POST\n\napplication/json\nWed, 26 Nov 2026 00:00:00 GMT\n/devstoreaccount1/bench"
	b.Run("pooled", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			_ = mac(key, sts)
		}
	})
	b.Run("hmac.New", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			_ = reference(key, sts)
		}
	})
}
