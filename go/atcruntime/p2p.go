// P2P URLs and pod-to-pod copies. GetStreamInP2PURL returns a URL that describes its destination
// itself, so the web node that acts on it (ATC hands it to StreamP2POut, perhaps on another node)
// needs nothing but the destination worker's key:
//
//	stepshim-p2p://<pod>/?v=2&worker=<name>&path=<abs dir>[&owner=<uid>:<gid>]&expires=<unix s>&sig=<hex>
//
// The signature (HMAC-SHA256) covers the namespace, worker, pod, path, owner and expiry under a
// sub-key of the worker's key (the HMAC of a name no pod can have, see p2pKeyName), so it never
// exposes a pod's token and a URL changed in any signed part is refused. Query parameters it does not
// sign are tolerated: ATC appends `limit=<MB>`, which the copy honours.
//
// The source volume may belong to another worker than the URL's, in another namespace and with
// another key, when both are in one Cluster (cluster.go): the source's worker grants a read of the
// source, the destination's worker asks its shim to pull. The copy itself is a pull by the
// destination's shim with that grant, identity on the wire (results/atc-streaming/ has the
// measurements that keep it so).

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

// p2pTarget is a URL's destination: an absolute directory of a pod of a worker, who owns what is
// copied there (nil: the source's owners), and the limit appended to it.
type p2pTarget struct {
	Worker, Pod, Path string
	Owner             *shim.Owner
	// Limit is the decompressed tar's cap in bytes, 0 for none; LimitInMB is it as given.
	Limit     int64
	LimitInMB float64
}

// p2pSigner signs and checks URLs for one worker.
type p2pSigner struct {
	namespace, worker string
	key               []byte
	ttl               time.Duration
}

func newSigner(pods kitPods, ttl time.Duration) *p2pSigner {
	if ttl <= 0 {
		ttl = DefaultP2PURLTTL
	}
	return &p2pSigner{namespace: pods.Namespace(), worker: pods.Name(), key: []byte(pods.Token(p2pKeyName)), ttl: ttl}
}

func (s *p2pSigner) mac(pod, dir, owner string, expires int64) string {
	m := hmac.New(sha256.New, s.key)
	for _, part := range []string{"v2", s.namespace, s.worker, pod, dir, owner, strconv.FormatInt(expires, 10)} {
		m.Write([]byte(strconv.Itoa(len(part))))
		m.Write([]byte{':'})
		m.Write([]byte(part))
	}
	return hex.EncodeToString(m.Sum(nil))
}

// sign is the URL of t (a pod of the signer's worker), valid from now for the signer's TTL.
func (s *p2pSigner) sign(t p2pTarget, now time.Time) string {
	expires := now.Add(s.ttl).Unix()
	owner := formatOwner(t.Owner)
	q := url.Values{"v": {"2"}, "worker": {s.worker}, "path": {t.Path}, "expires": {strconv.FormatInt(expires, 10)},
		"sig": {s.mac(t.Pod, t.Path, owner, expires)}}
	if owner != "" {
		q.Set("owner", owner)
	}
	u := url.URL{Scheme: p2pScheme, Host: t.Pod, Path: "/", RawQuery: q.Encode()}
	return u.String()
}

// parsedURL is a URL's parts before its signature is checked.
type parsedURL struct {
	worker, pod, dir, owner, sig string
	expires                      int64
	query                        url.Values
}

// parseURL reads raw's parts; it checks their form, not the signature.
func parseURL(raw string) (parsedURL, error) {
	u, err := url.Parse(raw)
	if err != nil {
		return parsedURL{}, fmt.Errorf("%w: %v", ErrP2PURL, err)
	}
	if u.Scheme != p2pScheme || !validPodName(u.Host) {
		return parsedURL{}, fmt.Errorf("%w: %q is not a %s:// URL of a pod (another runtime's worker?)", ErrP2PURL, raw, p2pScheme)
	}
	q := u.Query()
	one := func(name string) (string, error) {
		if len(q[name]) != 1 {
			return "", fmt.Errorf("%w: want exactly one %q parameter", ErrP2PURL, name)
		}
		return q[name][0], nil
	}
	p := parsedURL{pod: u.Host, query: q}
	var v, exp string
	for _, f := range []struct {
		name string
		to   *string
	}{{"v", &v}, {"worker", &p.worker}, {"path", &p.dir}, {"expires", &exp}, {"sig", &p.sig}} {
		if *f.to, err = one(f.name); err != nil {
			return parsedURL{}, err
		}
	}
	if len(q["owner"]) > 1 {
		return parsedURL{}, fmt.Errorf("%w: want at most one \"owner\" parameter", ErrP2PURL)
	}
	p.owner = q.Get("owner")
	p.expires, err = strconv.ParseInt(exp, 10, 64)
	if v != "2" || err != nil || path.Clean(p.dir) != p.dir || !path.IsAbs(p.dir) || p.worker == "" {
		return parsedURL{}, fmt.Errorf("%w: malformed version, worker, expiry or path", ErrP2PURL)
	}
	return p, nil
}

// verify is the target of raw if it is a URL this worker signed and it has not expired at now, with
// the limit a `limit` parameter gives.
func (s *p2pSigner) verify(raw string, now time.Time) (p2pTarget, error) {
	p, err := parseURL(raw)
	if err != nil {
		return p2pTarget{}, err
	}
	if p.worker != s.worker || !hmac.Equal([]byte(p.sig), []byte(s.mac(p.pod, p.dir, p.owner, p.expires))) {
		return p2pTarget{}, fmt.Errorf("%w: bad signature (changed, or made by another worker)", ErrP2PURL)
	}
	if now.Unix() > p.expires {
		return p2pTarget{}, fmt.Errorf("%w: expired %s ago", ErrP2PURL, now.Sub(time.Unix(p.expires, 0)).Round(time.Second))
	}
	t := p2pTarget{Worker: p.worker, Pod: p.pod, Path: p.dir}
	if p.owner != "" {
		if t.Owner, err = parseOwner(p.owner); err != nil {
			return p2pTarget{}, err
		}
	}
	q := p.query
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

// formatOwner is owner as "uid:gid", empty for nil.
func formatOwner(o *shim.Owner) string {
	if o == nil {
		return ""
	}
	return strconv.FormatUint(uint64(o.UID), 10) + ":" + strconv.FormatUint(uint64(o.GID), 10)
}

func parseOwner(s string) (*shim.Owner, error) {
	u, g, ok := strings.Cut(s, ":")
	uid, err1 := strconv.ParseUint(u, 10, 32)
	gid, err2 := strconv.ParseUint(g, 10, 32)
	if !ok || err1 != nil || err2 != nil {
		return nil, fmt.Errorf("%w: owner %q is not uid:gid", ErrP2PURL, s)
	}
	return &shim.Owner{UID: uint32(uid), GID: uint32(gid)}, nil
}

// copyLimited copies the contents of src in srcPod (a pod of s) into dst, a pod of the worker of
// store to, refusing a tree whose tar is over dst's limit before anything moves (the source's
// stream length), and cancelling the pull if the tree grew past it meanwhile.
func (s *volumeStore) copyLimited(ctx context.Context, srcPod, src string, to *volumeStore, dst p2pTarget) error {
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
	return s.copy(ctx, srcPod, src, to, dst)
}

// copyDir copies the contents of src in srcPod into dst in dstPod (created if missing; entries of
// dst the source does not name are kept), pod to pod; owner, if set, owns every entry copied and
// every directory the copy creates (PROTOCOL.md 4.8.3), else the owners are the source's.
func (s *volumeStore) copyDir(ctx context.Context, srcPod, src, dstPod, dst string, owner *shim.Owner) error {
	return s.copy(ctx, srcPod, src, s, p2pTarget{Pod: dstPod, Path: dst, Owner: owner})
}

// copy has the shim of dst's pod, a pod of the worker of store to, pull src of srcPod, a pod of s,
// with a read grant s makes on it.
func (s *volumeStore) copy(ctx context.Context, srcPod, src string, to *volumeStore, dst p2pTarget) error {
	sc, err := s.pods.Connect(ctx, srcPod)
	if err != nil {
		return err
	}
	dc, err := to.pods.Connect(ctx, dst.Pod)
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
	spec := shim.PullSpec{Source: source, SourcePin: pin, Path: contents(src), Token: token, Target: dst.Path, Owner: dst.Owner}
	if _, _, err := dc.Pull(ctx, id, spec, 0); err != nil {
		return fmt.Errorf("atcruntime: pull into %s:%s: %w", dst.Pod, dst.Path, err)
	}
	defer func() { _ = dc.DeletePull(context.WithoutCancel(ctx), id) }()
	return waitPull(ctx, dc, id, dst)
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
