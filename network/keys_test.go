package network

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/nats-io/jwt/v2"
	"github.com/nats-io/nkeys"
)

// userJWT returns a user JWT for the public key pub, issued by a new
// account.
func userJWT(t *testing.T, pub string) string {
	t.Helper()
	acc, err := nkeys.CreateAccount()
	if err != nil {
		t.Fatal(err)
	}
	token, err := jwt.NewUserClaims(pub).Encode(acc)
	if err != nil {
		t.Fatal(err)
	}
	return token
}

// TestWriteCreds joins a key of WriteKey and a user JWT issued for it into
// a credentials file that ReadKey reads back as the same identity, and
// refuses a JWT of another key, a file that is not a JWT, a key file that
// is already credentials and an existing output.
func TestWriteCreds(t *testing.T) {
	dir := t.TempDir()
	write := func(name, content string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	keyPath := filepath.Join(dir, "a.nkey")
	pub, err := WriteKey(keyPath)
	if err != nil {
		t.Fatal(err)
	}
	otherPub, err := WriteKey(filepath.Join(dir, "b.nkey"))
	if err != nil {
		t.Fatal(err)
	}
	good := write("a.jwt", userJWT(t, pub)+"\n")
	out := filepath.Join(dir, "a.creds")
	if err := WriteCreds(out, keyPath, good); err != nil {
		t.Fatal(err)
	}
	fi, err := os.Stat(out)
	if err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("credentials file: %v, mode %v; want mode 0600", err, fi.Mode())
	}
	k, err := ReadKey(out)
	if err != nil {
		t.Fatal(err)
	}
	want, err := ReadKey(keyPath)
	if err != nil {
		t.Fatal(err)
	}
	if k.Public != pub || string(k.Seed) != string(want.Seed) || k.Creds != out {
		t.Errorf("ReadKey(credentials) = public %s, creds %q; want %s, %q and the key's seed", k.Public, k.Creds, pub, out)
	}
	for _, tc := range []struct {
		name, out, key, jwt, want string
	}{
		{"another key's JWT", filepath.Join(dir, "x1.creds"), keyPath, write("b.jwt", userJWT(t, otherPub)), "was issued for " + otherPub},
		{"not a JWT", filepath.Join(dir, "x2.creds"), keyPath, write("junk.jwt", "hello"), "is not a NATS user JWT"},
		{"credentials as key", filepath.Join(dir, "x3.creds"), out, good, "is already a credentials file"},
		{"existing output", out, keyPath, good, "exists: a credentials file is never overwritten"},
	} {
		err := WriteCreds(tc.out, tc.key, tc.jwt)
		if !errors.Is(err, ErrKey) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want ErrKey and %q", tc.name, err, tc.want)
		}
		if tc.out != out {
			if _, err := os.Stat(tc.out); !os.IsNotExist(err) {
				t.Errorf("%s: %s written", tc.name, tc.out)
			}
		}
	}
}

// TestKeyFileReadableByOthers: a key file that others may read is refused,
// naming the fix; one only its owner may read is read.
func TestKeyFileReadableByOthers(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "a.nkey")
	pub, err := WriteKey(path)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		mode os.FileMode
		ok   bool
	}{{0o600, true}, {0o400, true}, {0o640, false}, {0o644, false}, {0o604, false}, {0o660, false}} {
		if err := os.Chmod(path, tc.mode); err != nil {
			t.Fatal(err)
		}
		k, err := ReadKey(path)
		switch {
		case tc.ok && (err != nil || k.Public != pub):
			t.Errorf("mode %04o: %v", tc.mode, err)
		case !tc.ok && (!errors.Is(err, ErrKey) || !strings.Contains(err.Error(), "chmod 600")):
			t.Errorf("mode %04o: %v, want ErrKey saying chmod 600", tc.mode, err)
		}
	}
}

// TestAllowListSeedNotEchoed: a seed pasted into the allow-list is
// refused without echoing any of it.
func TestAllowListSeedNotEchoed(t *testing.T) {
	seed, pub, err := NewKey()
	if err != nil {
		t.Fatal(err)
	}
	for _, list := range []string{
		string(seed) + "\n",
		pub + "\n# a comment\n" + string(seed) + " site-b\n",
		pub + "\n" + string(seed[:30]) + "\n", // a truncated seed
	} {
		_, err := ParseAllowList([]byte(list))
		if !errors.Is(err, ErrAllowList) || !strings.Contains(err.Error(), "secret seed") {
			t.Errorf("%v, want ErrAllowList naming a secret seed", err)
			continue
		}
		for i := 2; i+6 <= len(seed); i++ { // no 6 characters of the seed after its "SU"
			if strings.Contains(err.Error(), string(seed[i:i+6])) {
				t.Errorf("the error echoes the seed: %v", err)
				break
			}
		}
	}
}
