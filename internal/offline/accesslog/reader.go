package accesslog

import (
	"bufio"
	"compress/gzip"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
)

// Format is the format of a log.
type Format string

// The formats a Reader reads.
const (
	Auto     Format = "auto"     // json when the first non-blank line starts with "{", else combined
	Combined Format = "combined" // nginx/Apache combined (a common line is accepted too)
	Common   Format = "common"   // the common log format; what follows bytes is ignored
	JSON     Format = "json"     // one JSON object per line
)

// ParseFormat returns the Format named s; "" is Auto.
func ParseFormat(s string) (Format, error) {
	switch f := Format(strings.ToLower(strings.TrimSpace(s))); f {
	case "":
		return Auto, nil
	case Auto, Combined, Common, JSON:
		return f, nil
	}
	return "", fmt.Errorf("unknown log format %q (want auto, combined, common or json)", s)
}

// DefaultMaxLine is the longest line a Reader reads when Options.MaxLine
// is 0.
const DefaultMaxLine = 1 << 20

// Options configure a Reader.
type Options struct {
	Format  Format     // "" is Auto
	JSON    JSONFields // keys of a JSON log; zero: DefaultJSONFields
	MaxLine int        // longest line in bytes, without its line ending; 0: DefaultMaxLine
}

// LineError is a line that could not be read as an Entry. Reader.Read and
// Mapper.Map return it; reading can go on with the next line.
type LineError struct {
	Line   int    // 1-based line number
	Reason string // what is wrong with it
	Err    error  // the cause, or nil
}

// Error returns "line N: reason[: cause]".
func (e *LineError) Error() string {
	return fmt.Sprintf("line %d: %s", e.Line, e.Message())
}

// Message returns what is wrong with the line without its number:
// "reason[: cause]".
func (e *LineError) Message() string {
	if e.Err != nil {
		return e.Reason + ": " + e.Err.Error()
	}
	return e.Reason
}

// Unwrap returns the cause.
func (e *LineError) Unwrap() error { return e.Err }

// Reader reads Entries from a log, one per non-blank line. It reuses its
// buffers; each Entry holds one string copy of its line. A Reader is not
// safe for concurrent use.
type Reader struct {
	br      *bufio.Reader
	format  Format
	jsonOpt JSONFields
	json    *jsonParser
	max     int
	long    []byte // a line longer than br's buffer
	line    int
	bad     int
	zones   zones
	eof     bool
}

// NewReader returns a Reader of r. It fails only on bad Options.
func NewReader(r io.Reader, opt Options) (*Reader, error) {
	f := opt.Format
	if f == "" {
		f = Auto
	}
	switch f {
	case Auto, Combined, Common, JSON:
	default:
		return nil, fmt.Errorf("access log: unknown format %q (want auto, combined, common or json)", opt.Format)
	}
	if opt.MaxLine < 0 {
		return nil, fmt.Errorf("access log: MaxLine %d is negative", opt.MaxLine)
	}
	rd := &Reader{format: f, jsonOpt: opt.JSON, max: opt.MaxLine}
	if rd.max == 0 {
		rd.max = DefaultMaxLine
	}
	// Build the JSON parser now for json and auto, so that a bad field
	// configuration fails here, not at the first line.
	if f == JSON || f == Auto {
		p, err := newJSONParser(opt.JSON)
		if err != nil {
			return nil, fmt.Errorf("access log: %w", err)
		}
		rd.json = p
	}
	rd.br = bufio.NewReaderSize(r, min(64<<10, rd.max+2))
	return rd, nil
}

// Format returns the format being read: Auto until the first non-blank
// line decides it.
func (r *Reader) Format() Format { return r.format }

// Line returns the number of lines read so far, blank and bad ones
// included: after Read, the line number of what it returned.
func (r *Reader) Line() int { return r.line }

// Bad returns the number of lines that could not be read so far (each was
// returned as a *LineError).
func (r *Reader) Bad() int { return r.bad }

// Read reads the next non-blank line into e, which it resets first. It
// returns io.EOF at the end of the input, a *LineError for a line that
// does not parse or is longer than MaxLine (the next Read goes on with
// the next line), and any other error, "reading line N: cause", when the
// input fails.
func (r *Reader) Read(e *Entry) error {
	for {
		line, err := r.next()
		if err != nil {
			var le *LineError
			if errors.As(err, &le) {
				r.bad++
			}
			return err
		}
		if r.line == 1 && len(line) >= 3 && line[0] == 0xef && line[1] == 0xbb && line[2] == 0xbf {
			line = line[3:] // a UTF-8 byte order mark
		}
		line = trimSpaceBytes(line)
		if len(line) == 0 {
			continue
		}
		if r.format == Auto {
			r.format = Combined
			if line[0] == '{' {
				r.format = JSON
			}
		}
		*e = Entry{Line: r.line, raw: string(line)}
		switch r.format {
		case JSON:
			e.json = true
			err = r.json.parse(e.raw, e, &r.zones)
		case Common:
			err = parseCLF(e.raw, e, false, &r.zones)
		default:
			err = parseCLF(e.raw, e, true, &r.zones)
		}
		if err != nil {
			r.bad++
			return &LineError{Line: r.line, Reason: "not a " + string(r.format) + " log line", Err: err}
		}
		return nil
	}
}

// next returns the next line, without its line ending. The slice is valid
// until the next call.
func (r *Reader) next() ([]byte, error) {
	if r.eof {
		return nil, io.EOF
	}
	line, err := r.br.ReadSlice('\n')
	switch {
	case err == nil:
		r.line++
		if textLen(line) > r.max {
			return nil, r.tooLong()
		}
		return line[:len(line)-1], nil
	case errors.Is(err, bufio.ErrBufferFull):
		return r.nextLong(line)
	case err == io.EOF:
		r.eof = true
		if len(line) == 0 {
			return nil, io.EOF
		}
		r.line++
		if textLen(line) > r.max {
			return nil, r.tooLong()
		}
		return line, nil
	default:
		return nil, fmt.Errorf("reading line %d: %w", r.line+1, err)
	}
}

// nextLong reads the rest of a line that does not fit the buffer, and
// skips the rest of one longer than MaxLine.
func (r *Reader) nextLong(first []byte) ([]byte, error) {
	r.line++
	r.long = append(r.long[:0], first...)
	over := len(r.long) > r.max+2
	for {
		part, err := r.br.ReadSlice('\n')
		if !over {
			r.long = append(r.long, part...)
			// Longer than MaxLine and a CR LF, or so once the line is
			// whole: too long.
			if len(r.long) > r.max+2 || (!errors.Is(err, bufio.ErrBufferFull) && textLen(r.long) > r.max) {
				over = true
				r.long = r.long[:0]
			}
		}
		switch {
		case err == nil:
			if over {
				return nil, r.tooLong()
			}
			return r.long[:len(r.long)-1], nil
		case errors.Is(err, bufio.ErrBufferFull):
			continue
		case err == io.EOF:
			r.eof = true
			if over {
				return nil, r.tooLong()
			}
			return r.long, nil
		default:
			return nil, fmt.Errorf("reading line %d: %w", r.line, err)
		}
	}
}

// textLen is the length of a line without its line ending, "\n" or
// "\r\n" (or a last line's "\r"): what MaxLine limits.
func textLen(line []byte) int {
	n := len(line)
	if n > 0 && line[n-1] == '\n' {
		n--
	}
	if n > 0 && line[n-1] == '\r' {
		n--
	}
	return n
}

func (r *Reader) tooLong() error {
	if cap(r.long) > 4*r.max { // keep no huge buffer after a huge line
		r.long = nil
	}
	return &LineError{Line: r.line, Reason: fmt.Sprintf("line longer than %d bytes", r.max)}
}

// trimSpaceBytes drops a trailing \r (CRLF endings) and surrounding
// spaces and tabs.
func trimSpaceBytes(b []byte) []byte {
	for len(b) > 0 && (b[len(b)-1] == '\r' || b[len(b)-1] == ' ' || b[len(b)-1] == '\t') {
		b = b[:len(b)-1]
	}
	for len(b) > 0 && (b[0] == ' ' || b[0] == '\t') {
		b = b[1:]
	}
	return b
}

// Open opens the log at path for reading, decompressing it when it is
// gzip (told by its magic bytes, whatever its name; concatenated gzip
// members are read in turn). "-" reads stdin instead, which Close leaves
// open. Errors name the path (a read error's cause is "gzip: ..." when
// decompression fails).
func Open(path string, stdin io.Reader) (io.ReadCloser, error) {
	var src io.Reader
	var closer io.Closer
	if path == "-" {
		src = stdin
	} else {
		f, err := os.Open(path)
		if err != nil {
			return nil, fmt.Errorf("access log: %w", err)
		}
		src, closer = f, f
	}
	fail := func(err error) (io.ReadCloser, error) {
		if closer != nil {
			closer.Close()
		}
		return nil, fmt.Errorf("access log %s: %w", path, err)
	}
	br := bufio.NewReaderSize(src, 64<<10)
	magic, err := br.Peek(2)
	if err != nil && !errors.Is(err, io.EOF) {
		return fail(err)
	}
	if len(magic) == 2 && magic[0] == 0x1f && magic[1] == 0x8b {
		gz, err := gzip.NewReader(br)
		if err != nil {
			return fail(fmt.Errorf("gzip: %w", err))
		}
		return &logFile{Reader: gz, gz: gz, closer: closer}, nil
	}
	return &logFile{Reader: br, closer: closer}, nil
}

// logFile is an opened log.
type logFile struct {
	io.Reader
	gz     *gzip.Reader
	closer io.Closer // the file; nil for stdin
}

// Read says which errors come from decompression: a gzip stream that
// ends early is a truncated file, or one still being written.
func (f *logFile) Read(p []byte) (int, error) {
	n, err := f.Reader.Read(p)
	switch {
	case err == nil || err == io.EOF || f.gz == nil:
	case errors.Is(err, io.ErrUnexpectedEOF):
		err = fmt.Errorf("gzip: the data ends early (the file is truncated, or still being written): %w", err)
	default:
		err = fmt.Errorf("gzip: %w", err)
	}
	return n, err
}

func (f *logFile) Close() error {
	var err error
	if f.gz != nil {
		err = f.gz.Close()
	}
	if f.closer != nil {
		if cerr := f.closer.Close(); err == nil {
			err = cerr
		}
	}
	return err
}
