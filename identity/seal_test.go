package identity

import (
	"encoding/json"
	"errors"
	"testing"
)

// A random token's identity is sealed with the light derivation, which
// the envelope records, and opens only with that token.
func TestSeal_RandomTokenIsLight(t *testing.T) {
	token, err := NewToken()
	if err != nil {
		t.Fatal(err)
	}
	for _, random := range []bool{false, true} {
		sealed, err := seal(token, []byte("secret"), []byte("k"), random)
		if err != nil {
			t.Fatal(err)
		}
		var e envelope
		if err := json.Unmarshal(sealed, &e); err != nil {
			t.Fatal(err)
		}
		want := uint32(argonMemoryKiB)
		if random {
			want = lightMemoryKiB
		}
		if e.Memory != want {
			t.Errorf("random=%v: sealed with %d KiB, want %d", random, e.Memory, want)
		}
		got, err := open(token, sealed, []byte("k"))
		if err != nil || string(got) != "secret" {
			t.Errorf("random=%v: open = %q, %v", random, got, err)
		}
		if _, err := open(token+"0", sealed, []byte("k")); !errors.Is(err, ErrWrongToken) {
			t.Errorf("random=%v: a wrong token opened it (%v)", random, err)
		}
	}
}
