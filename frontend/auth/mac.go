package auth

import (
	"crypto/hmac"
	"crypto/sha256"
	"hash"
	"sync"
)

// macs keeps keyed HMAC-SHA256 states per account key. hmac.New allocates
// two SHA-256 states and pads the key into both on every call; a state from
// the pool, once Reset, restores its keyed inner and outer states by copy.
// Every request signed with a shared key computes one MAC per key tried.
var macs = macCache{pools: make(map[string]*sync.Pool)}

// maxCachedKeys bounds the cache: keys change only when an operator rotates
// them, so a few per account are ever in use; past the bound a MAC is
// computed without a pool.
const maxCachedKeys = 256

type macCache struct {
	mu    sync.Mutex
	pools map[string]*sync.Pool
}

// pool returns the pool of HMAC states for key, or nil when the cache is full.
func (c *macCache) pool(key []byte) *sync.Pool {
	c.mu.Lock()
	defer c.mu.Unlock()
	p := c.pools[string(key)]
	if p == nil && len(c.pools) < maxCachedKeys {
		k := string(key) // a copy: the pool must not see the caller's bytes change
		p = &sync.Pool{New: func() any { return &macState{h: hmac.New(sha256.New, []byte(k))} }}
		c.pools[k] = p
	}
	return p
}

// mac is HMAC-SHA256 of stringToSign under key.
func mac(key []byte, stringToSign string) [sha256.Size]byte {
	return macBytes(key, []byte(stringToSign))
}

// macBytes is mac of a string to sign built in a buffer (the shared-key
// check builds it in a pooled one: no copy per request).
func macBytes(key, stringToSign []byte) [sha256.Size]byte {
	p := macs.pool(key)
	if p == nil {
		var sum [sha256.Size]byte
		h := hmac.New(sha256.New, key)
		h.Write(stringToSign)
		h.Sum(sum[:0])
		return sum
	}
	st := p.Get().(*macState)
	st.h.Write(stringToSign)
	// Summed into the pooled state's own array: a local one would escape
	// through the interface call, an allocation per request.
	st.h.Sum(st.sum[:0])
	sum := st.sum
	st.h.Reset()
	p.Put(st)
	return sum
}

// macState is a pooled keyed HMAC state and the array its sums go to.
type macState struct {
	h   hash.Hash
	sum [sha256.Size]byte
}
