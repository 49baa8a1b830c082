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
		p = &sync.Pool{New: func() any { return hmac.New(sha256.New, []byte(k)) }}
		c.pools[k] = p
	}
	return p
}

// mac is HMAC-SHA256 of stringToSign under key.
func mac(key []byte, stringToSign string) [sha256.Size]byte {
	var sum [sha256.Size]byte
	p := macs.pool(key)
	var h hash.Hash
	if p != nil {
		h = p.Get().(hash.Hash)
	} else {
		h = hmac.New(sha256.New, key)
	}
	h.Write([]byte(stringToSign))
	h.Sum(sum[:0])
	if p != nil {
		h.Reset()
		p.Put(h)
	}
	return sum
}
