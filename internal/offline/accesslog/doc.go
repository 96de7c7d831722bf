// Package accesslog reads web server access logs and maps their lines to
// check bodies (rules.Input), for `ruled replay`.
//
// # Formats
//
// A Reader reads one Entry per line; blank lines are skipped, a line that
// does not parse is a *LineError with its line number (the caller skips
// it or stops), and so is a line longer than Options.MaxLine (1 MiB by
// default, not counting its \n or \r\n). A UTF-8 byte order mark before
// the first line is dropped. Open opens a file, decompressing gzip
// whatever its name.
//
//   - combined: the nginx/Apache combined format,
//     `$remote_addr - $remote_user [$time_local] "$request" $status $body_bytes_sent "$http_referer" "$http_user_agent"`.
//     Quoted fields may hold the escapes both servers write (\" \\ \n \r
//     \t \xHH); "-" is an empty field, and a bytes of "-" is 0. A line
//     that stops after bytes (a common line) is accepted; what follows the
//     user agent is ignored. The time must be dd/Mon/yyyy:hh:mm:ss ±hhmm
//     and keeps its offset. The user may hold spaces and brackets: the
//     time is the first "[" that starts such a time followed by "]" and
//     the quoted request. The address must be an IP address or a host
//     name (no ":"): a line of Apache's vhost_combined format, which
//     logs host:port first, is an error that says so.
//   - common: the same without referer and user agent; what follows bytes
//     is ignored.
//   - json: one JSON object per line; see below.
//   - auto: json when the first non-blank line starts with "{", else
//     combined.
//
// In every format a path is percent-decoded as ruled decodes a live
// request's (Entry.URI keeps it as logged), an absolute-form target
// (http://host/p) gives its path (and the host when none is logged), and
// an IPv4-mapped IPv6 address (::ffff:1.2.3.4) is unmapped.
//
// # JSON logs
//
// A json log has one object per line, as nginx writes with escape=json
// (nginx's \xHH of escape=default is tolerated in strings). The keys read
// are configurable (JSONFields): each field has a list of keys tried in
// order, the first present and neither null, "" nor "-" wins, and a
// dotted key also names a key of a nested object (Caddy's
// request.method). The defaults are those of common nginx setups:
//
//	time        time, time_iso8601, time_local, msec, @timestamp, timestamp, ts
//	ip          remote_addr, client_ip, ip
//	method      request_method, method
//	uri         request_uri, uri, path
//	query       args, query_string (used when the uri has no query)
//	host        host, http_host, server_name
//	user        remote_user, user
//	status      status
//	bytes       body_bytes_sent, bytes_sent
//	referer     http_referer, referer
//	user_agent  http_user_agent, user_agent
//	request     request (a request line: gives method, uri, proto when their keys are missing)
//	proto       server_protocol, protocol
//
// The time is required. It may be an RFC 3339 string (with a fraction of
// up to 9 digits and an offset, Z, ±hh:mm or ±hhmm, kept), a combined-log time
// string (dd/Mon/yyyy:hh:mm:ss ±hhmm), or a Unix timestamp, as a JSON
// number or a string holding one, with an optional fraction: seconds
// (nginx $msec), or, when its whole part is 1e11 or more, milliseconds
// (1e14 or more: microseconds; 1e17 or more: nanoseconds). Status and
// bytes are whole numbers, as JSON numbers or strings. An ip with a port
// (1.2.3.4:80, [::1]:80) loses it.
//
// # Mapping
//
// A Mapper turns an Entry into a rules.Input. By default it sets
//
//	request.ip       the client address
//	request.method   the method
//	request.path     the path, without the query
//	request.host     the host (empty in combined and common logs)
//	request.user     the remote user
//	request.query    the query parameters, the first value of each
//	request.headers  user-agent and referer, when logged
//
// and no attrs. Each --map spec, TARGET=EXPR, sets one target: TARGET is
// ip, method, path, host, user, headers.NAME (lower-cased), query.NAME or
// attrs.NAME. A spec replaces the default of its target (ip=... the
// address, headers.user-agent=... the logged user agent); query.NAME adds
// to, or overrides one parameter of, the default query. A target may be
// set once. EXPR is an expr-lang expression (the language of rule files)
// over the line's variables:
//
//	ip, method, uri, path, host, user,
//	proto, referer, user_agent, request   strings ("" for "-"; uri as logged)
//	query                                 map of query parameters
//	status, bytes                         integers
//	time                                  the request's time (time.Time)
//	fields                                the JSON object of a json log
//	                                      (numbers are floats); empty otherwise
//
// Every expression sees the line, not what other specs set. fields.NAME
// (or fields["NAME"]) reads that one key from the line, and is nil when
// the key is missing or null, or its value is the string "" or "-":
// nginx logs a missing variable so (escape=json as "", escape=default as
// "-"), and the JSONFields keys skip those values too. Other uses of
// fields (fields[x], "k" in fields, keys(fields)) decode the whole
// object with encoding/json, several microseconds a line, and see its
// values as logged.
//
// The result is turned into a string: numbers plainly (200, 0.25, never
// an exponent), booleans as true or false, a time in RFC 3339, nil as "".
// A result that is a list or a map is an error. A headers, query or attrs
// target whose value is "" is left out, so `headers.referer=""` drops the
// default referer. For example:
//
//	--map 'attrs.tenant=fields.tenant_id'
//	--map 'headers.x-api-key=query.api_key'
//	--map 'ip=trim(split(fields.http_x_forwarded_for ?? ip, ",")[0])'
//	--map 'attrs.class=status >= 500 ? "error" : "ok"'
//
// An expression that does not compile is an error of NewMapper naming
// its spec; one that fails on a line is a *LineError for that line.
package accesslog
