// P2P URLs and pod-to-pod copies. GetStreamInP2PURL returns a URL that describes its destination
// itself, so the web node that acts on it (ATC hands it to StreamP2POut, perhaps on another node)
// needs nothing but the worker's key:
//
//	stepshim-p2p://<pod>/?v=1&path=<abs dir>&expires=<unix seconds>&sig=<hex HMAC-SHA256>
//
// The signature covers the namespace, pod, path and expiry under a sub-key of the worker's key (the
// HMAC of a name no pod can have, see p2pKeyName), so it never exposes a pod's token and a URL changed
// in any signed part is refused. Query parameters it does not sign are tolerated: ATC appends
// `limit=<MB>`, which the copy honours. The copy itself is a pull by the destination's shim with a
// read grant on the source, identity on the wire (results/atc-streaming/ has the measurements that
// keep it so).

package atcruntime

import (
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"net/url"
	"path"
	"regexp"
	"strconv"
	"strings"
	"time"

	"stepshim.dev/go/shim"
)

// p2pScheme is the scheme of the URLs; p2pKeyName the name whose token is the signing sub-key ('#'
// never occurs in a pod name, so no pod has that token).
const (
	p2pScheme  = "stepshim-p2p"
	p2pKeyName = "#atcruntime/p2p-url/v1"
	// DefaultP2PURLTTL is how long a URL is valid when VolumeConfig.P2PURLTTL is zero.
	DefaultP2PURLTTL = 10 * time.Minute
	// grantTTL bounds a copy's read grant; a pull that began before it expired runs to its end.
	grantTTL = 10 * time.Minute
)

// ErrP2PURL is the error for a URL that is not a valid, unexpired one of this worker.
var ErrP2PURL = errors.New("atcruntime: invalid P2P URL")

// p2pTarget is a URL's destination: an absolute directory of a pod, and the limit appended to it.
type p2pTarget struct {
	Pod, Path string
	// Limit is the decompressed tar's cap in bytes, 0 for none; LimitInMB is it as given.
	Limit     int64
	LimitInMB float64
}

// p2pSigner signs and checks URLs for one worker.
type p2pSigner struct {
	namespace string
	key       []byte
	ttl       time.Duration
}

func newSigner(pods kitPods, ttl time.Duration) *p2pSigner {
	if ttl <= 0 {
		ttl = DefaultP2PURLTTL
	}
	return &p2pSigner{namespace: pods.Namespace(), key: []byte(pods.Token(p2pKeyName)), ttl: ttl}
}

func (s *p2pSigner) mac(pod, dir string, expires int64) string {
	m := hmac.New(sha256.New, s.key)
	for _, part := range []string{"v1", s.namespace, pod, dir, strconv.FormatInt(expires, 10)} {
		m.Write([]byte(strconv.Itoa(len(part))))
		m.Write([]byte{':'})
		m.Write([]byte(part))
	}
	return hex.EncodeToString(m.Sum(nil))
}

// sign is the URL of t, valid from now for the signer's TTL.
func (s *p2pSigner) sign(t p2pTarget, now time.Time) string {
	expires := now.Add(s.ttl).Unix()
	q := url.Values{"v": {"1"}, "path": {t.Path}, "expires": {strconv.FormatInt(expires, 10)},
		"sig": {s.mac(t.Pod, t.Path, expires)}}
	u := url.URL{Scheme: p2pScheme, Host: t.Pod, Path: "/", RawQuery: q.Encode()}
	return u.String()
}

// verify is the target of raw if it is a URL this worker signed and it has not expired at now, with
// the limit a `limit` parameter gives.
func (s *p2pSigner) verify(raw string, now time.Time) (p2pTarget, error) {
	u, err := url.Parse(raw)
	if err != nil {
		return p2pTarget{}, fmt.Errorf("%w: %v", ErrP2PURL, err)
	}
	if u.Scheme != p2pScheme || !validPodName(u.Host) {
		return p2pTarget{}, fmt.Errorf("%w: %q is not a %s:// URL of a pod", ErrP2PURL, raw, p2pScheme)
	}
	q := u.Query()
	one := func(name string) (string, error) {
		if len(q[name]) != 1 {
			return "", fmt.Errorf("%w: want exactly one %q parameter", ErrP2PURL, name)
		}
		return q[name][0], nil
	}
	var v, dir, exp, sig string
	for _, f := range []struct {
		name string
		to   *string
	}{{"v", &v}, {"path", &dir}, {"expires", &exp}, {"sig", &sig}} {
		if *f.to, err = one(f.name); err != nil {
			return p2pTarget{}, err
		}
	}
	expires, err := strconv.ParseInt(exp, 10, 64)
	if v != "1" || err != nil || path.Clean(dir) != dir || !path.IsAbs(dir) {
		return p2pTarget{}, fmt.Errorf("%w: malformed version, expiry or path", ErrP2PURL)
	}
	if !hmac.Equal([]byte(sig), []byte(s.mac(u.Host, dir, expires))) {
		return p2pTarget{}, fmt.Errorf("%w: bad signature (changed, or made by another worker)", ErrP2PURL)
	}
	if now.Unix() > expires {
		return p2pTarget{}, fmt.Errorf("%w: expired %s ago", ErrP2PURL, now.Sub(time.Unix(expires, 0)).Round(time.Second))
	}
	t := p2pTarget{Pod: u.Host, Path: dir}
	if lim, ok := q["limit"]; ok {
		if t.Limit, t.LimitInMB, err = parseLimit(lim); err != nil {
			return p2pTarget{}, fmt.Errorf("%w: %v", ErrP2PURL, err)
		}
	}
	return t, nil
}

// decimalMB is how a limit is written: decimal digits, a fraction, an exponent (ATC writes "%f").
// ParseFloat would also take "Inf", "NaN" and hexadecimal, none of which is a size.
var decimalMB = regexp.MustCompile(`^([0-9]+\.?[0-9]*|\.[0-9]+)([eE][+-]?[0-9]+)?$`)

// parseLimit reads the `limit` parameter's values: exactly one, a decimal number of MB that
// limitBytes takes, 0 (no limit) or at least one byte. Anything else is an error rather than no limit, so a URL whose limit was
// mangled or doubled is refused instead of copying without one.
func parseLimit(values []string) (bytes int64, mb float64, err error) {
	if len(values) != 1 {
		return 0, 0, fmt.Errorf("want one limit parameter, got %d", len(values))
	}
	if !decimalMB.MatchString(values[0]) {
		return 0, 0, fmt.Errorf("limit %q: not a decimal number of MB", values[0])
	}
	if mb, err = strconv.ParseFloat(values[0], 64); err != nil {
		return 0, 0, fmt.Errorf("limit %q: %v", values[0], err)
	}
	if bytes, err = limitBytes(mb); err != nil {
		return 0, 0, err
	}
	// ATC writes six decimals, so the least limit it writes is a byte; a positive limit under one
	// byte was not written by ATC and would otherwise be no limit.
	if mb > 0 && bytes < 1 {
		return 0, 0, fmt.Errorf("limit %q: under one byte (0 is no limit)", values[0])
	}
	return bytes, mb, nil
}

// copyLimited copies the contents of src in srcPod into dst, refusing a tree whose tar is over dst's
// limit before anything moves (the source's stream length), and cancelling the pull if the tree grew
// past it meanwhile.
func (s *volumeStore) copyLimited(ctx context.Context, srcPod, src string, dst p2pTarget) error {
	if dst.Limit > 0 {
		c, err := s.pods.Connect(ctx, srcPod)
		if err != nil {
			return err
		}
		n, _, err := c.FilesLength(ctx, contents(src))
		if err != nil {
			return fmt.Errorf("atcruntime: p2p source %s:%s: %w", srcPod, src, err)
		}
		if n > dst.Limit {
			return &StreamLimitError{LimitInMB: dst.LimitInMB, Limit: dst.Limit}
		}
	}
	return s.copy(ctx, srcPod, src, dst.Pod, dst.Path, dst, nil)
}

// copyDir copies the contents of src in srcPod into dst in dstPod (created if missing; entries of
// dst the source does not name are kept), pod to pod; owner, if set, owns every entry copied and
// every directory the copy creates (PROTOCOL.md 4.8.3), else the owners are the source's.
func (s *volumeStore) copyDir(ctx context.Context, srcPod, src, dstPod, dst string, owner *shim.Owner) error {
	return s.copy(ctx, srcPod, src, dstPod, dst, p2pTarget{}, owner)
}

func (s *volumeStore) copy(ctx context.Context, srcPod, src, dstPod, dst string, lim p2pTarget, owner *shim.Owner) error {
	sc, err := s.pods.Connect(ctx, srcPod)
	if err != nil {
		return err
	}
	dc, err := s.pods.Connect(ctx, dstPod)
	if err != nil {
		return err
	}
	source, pin, err := s.pods.PullSource(srcPod)
	if err != nil {
		return err
	}
	token, g, err := sc.Grant(ctx, src, grantTTL, 0)
	if err != nil {
		return fmt.Errorf("atcruntime: grant on %s:%s: %w", srcPod, src, err)
	}
	defer func() { _ = sc.RevokeGrant(context.WithoutCancel(ctx), g.ID) }()
	id, err := pullID()
	if err != nil {
		return err
	}
	spec := shim.PullSpec{Source: source, SourcePin: pin, Path: contents(src), Token: token, Target: dst, Owner: owner}
	if _, _, err := dc.Pull(ctx, id, spec, 0); err != nil {
		return fmt.Errorf("atcruntime: pull into %s:%s: %w", dstPod, dst, err)
	}
	defer func() { _ = dc.DeletePull(context.WithoutCancel(ctx), id) }()
	return waitPull(ctx, dc, id, lim)
}

// waitPull waits for pull id to end; with a limit it checks the pull's progress every second and
// cancels it (nothing is moved into place) once its stream is longer than the limit.
func waitPull(ctx context.Context, c *shim.Client, id string, lim p2pTarget) error {
	wait := 60 * time.Second
	if lim.Limit > 0 {
		wait = time.Second
	}
	for {
		p, err := c.PullStatus(ctx, id, wait)
		if err != nil {
			return err
		}
		if lim.Limit > 0 && max(p.Total, p.Bytes) > uint64(lim.Limit) && p.State == shim.PullRunning {
			_ = c.DeletePull(context.WithoutCancel(ctx), id)
			return &StreamLimitError{LimitInMB: lim.LimitInMB, Limit: lim.Limit}
		}
		switch p.State {
		case shim.PullDone:
			return nil
		case shim.PullFailed:
			return fmt.Errorf("atcruntime: pull %s:%s into %s failed: %s", p.Source, p.Path, p.Target, p.Error)
		}
	}
}

// contents is the files path of dir's contents (a trailing "/").
func contents(dir string) string {
	if strings.HasSuffix(dir, "/") {
		return dir
	}
	return dir + "/"
}

func pullID() (string, error) {
	var raw [12]byte
	if _, err := rand.Read(raw[:]); err != nil {
		return "", err
	}
	return "vol-" + hex.EncodeToString(raw[:]), nil
}
