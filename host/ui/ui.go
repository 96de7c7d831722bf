// Package ui is ruled's status page: plain HTML, CSS and JavaScript embedded
// in the binary, with no external assets, served under /ui/.
//
// The page polls the read-only admin endpoints (GET /v1/admin/stats, rules
// and plugins) every second and draws each rule's allowed and denied rates,
// computed in the browser from the counters' differences. Every 10 s it
// reads the first page of GET /v1/admin/counters of each rule (20 at most,
// one after the other) and shows the few subjects nearest to or over their
// limit. It sends the admin token as "Authorization: Bearer"; it reads the
// token from the URL fragment (/ui/#token=...) or a prompt and keeps it in
// sessionStorage.
package ui

import (
	"embed"
	"net/http"
)

//go:embed index.html app.js style.css
var files embed.FS

// csp allows the page's own files and same-origin fetches only.
const csp = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; " +
	"base-uri 'none'; form-action 'none'; frame-ancestors 'none'"

// Handler serves the page's files at the root ("/", "/app.js", ...); mount
// it under /ui/ with the prefix stripped.
func Handler() http.Handler {
	fs := http.FileServerFS(files)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h := w.Header()
		h.Set("Content-Security-Policy", csp)
		h.Set("X-Content-Type-Options", "nosniff")
		h.Set("Referrer-Policy", "no-referrer")
		h.Set("Cache-Control", "no-cache")
		fs.ServeHTTP(w, r)
	})
}
