// ruled status page. Polls the read-only admin endpoints and draws each
// rule's allowed and denied rates from the differences of its counters.
'use strict';

(function () {
  const POLL_MS = 1000;      // stats poll interval
  const POINTS = 60;         // samples kept per chart
  const REFRESH_EVERY = 5;   // rules and plugins are fetched every 5th poll, and after a reload
  // The subjects nearest their limit come from each rule's first page of
  // GET /v1/admin/counters: a bounded scan and a peek per subject, so they
  // are read rule after rule, for at most COUNTER_RULES rules, once every
  // COUNTERS_EVERY polls (and after the rules change), never while the
  // last round is still running, and never in the way of the stats poll.
  const COUNTERS_EVERY = 10;
  const COUNTER_RULES = 20;
  const COUNTER_PAGE = 100;  // subjects asked of each rule's first page
  const COUNTERS_SHOWN = 3;  // subjects shown per rule
  const TOKEN_KEY = 'ruled-admin-token';
  const SVG = 'http://www.w3.org/2000/svg';
  const W = 240, H = 44;

  const $ = (id) => document.getElementById(id);

  // The token comes from the fragment (/ui/#token=...), which browsers never
  // send to servers; it is moved to sessionStorage and the fragment cleared.
  const frag = /(?:^#|&)token=([^&]*)/.exec(location.hash);
  if (frag) {
    sessionStorage.setItem(TOKEN_KEY, decodeURIComponent(frag[1]));
    history.replaceState(null, '', location.pathname + location.search);
  }
  let token = sessionStorage.getItem(TOKEN_KEY) || '';

  const state = {
    polls: 0,
    reloads: -1,          // ok + error reloads at the last rules fetch
    rules: [],            // from /v1/admin/rules
    status: null,         // load status from /v1/admin/rules
    plugins: [],          // from /v1/admin/plugins
    prev: null,           // previous stats
    series: new Map(),    // rule -> {allowed: [], denied: []}
    counters: null,       // rule -> {counters: [], error: ''}, from /v1/admin/counters
    countersAt: -1,       // the poll of the last counters round
    countersRules: '',    // the rule names of the last counters round
    countersBusy: false,
    counterRounds: 0,     // counters rounds completed
    timer: 0,
  };

  class HTTPError extends Error {
    constructor(status, message) { super(message); this.status = status; }
  }

  async function get(path) {
    const headers = token ? { Authorization: 'Bearer ' + token } : {};
    const resp = await fetch(path, { headers, cache: 'no-store' });
    if (!resp.ok) {
      let msg = resp.status + ' ' + resp.statusText;
      try {
        const body = await resp.json();
        if (body && body.error && body.error.message) msg = body.error.message;
      } catch (e) { /* not JSON */ }
      throw new HTTPError(resp.status, msg);
    }
    return resp.json();
  }

  function el(tag, attrs, ...children) {
    const e = document.createElement(tag);
    for (const [k, v] of Object.entries(attrs || {})) {
      if (k === 'class') e.className = v; else e.setAttribute(k, v);
    }
    for (const c of children) e.append(c instanceof Node ? c : document.createTextNode(String(c)));
    return e;
  }

  function showMessage(text, kind) {
    const m = $('message');
    m.textContent = text;
    m.className = 'message ' + (kind || 'error');
    m.hidden = !text;
  }

  function fmtRate(r) {
    if (r >= 100) return r.toFixed(0);
    if (r >= 10) return r.toFixed(1);
    return r.toFixed(2);
  }

  function sum(obj, keys) {
    let n = 0;
    for (const k of keys) n += (obj && obj[k]) || 0;
    return n;
  }

  // record appends one sample of each rule's rates, computed from the
  // counters of this poll and the previous one.
  function record(stats) {
    const prev = state.prev;
    const dt = prev ? (Date.parse(stats.time) - Date.parse(prev.time)) / 1000 : 0;
    for (const [name, rs] of Object.entries(stats.rules || {})) {
      let s = state.series.get(name);
      if (!s) { s = { allowed: [], denied: [] }; state.series.set(name, s); }
      const old = prev && prev.rules && prev.rules[name];
      let a = 0, d = 0;
      if (old && dt > 0) {
        a = Math.max(0, (rs.outcomes.allowed - old.outcomes.allowed) / dt);
        d = Math.max(0, (rs.outcomes.denied - old.outcomes.denied) / dt);
      }
      if (prev) {
        s.allowed.push(a); s.denied.push(d);
        if (s.allowed.length > POINTS) { s.allowed.shift(); s.denied.shift(); }
      }
    }
    state.prev = stats;
  }

  function polyline(values, max, cls) {
    const step = W / (POINTS - 1);
    const off = POINTS - values.length;
    const pts = values.map((v, i) =>
      ((off + i) * step).toFixed(1) + ',' + (H - 2 - (v / max) * (H - 4)).toFixed(1));
    const p = document.createElementNS(SVG, 'polyline');
    p.setAttribute('class', cls);
    p.setAttribute('points', pts.join(' '));
    return p;
  }

  function chart(name, rs) {
    const s = state.series.get(name) || { allowed: [], denied: [] };
    let peak = 0;
    for (const v of s.allowed) peak = Math.max(peak, v);
    for (const v of s.denied) peak = Math.max(peak, v);
    const max = Math.max(1, peak);
    const svg = document.createElementNS(SVG, 'svg');
    const last = (a) => (a.length ? a[a.length - 1] : 0);
    svg.setAttribute('class', 'chart');
    svg.setAttribute('viewBox', '0 0 ' + W + ' ' + H);
    svg.setAttribute('width', W);
    svg.setAttribute('height', H);
    svg.setAttribute('data-rule', name);
    svg.setAttribute('data-allowed-total', rs ? rs.outcomes.allowed : 0);
    svg.setAttribute('data-denied-total', rs ? rs.outcomes.denied : 0);
    svg.setAttribute('data-allowed-rate', fmtRate(last(s.allowed)));
    svg.setAttribute('data-denied-rate', fmtRate(last(s.denied)));
    svg.setAttribute('data-peak-rate', fmtRate(peak));
    svg.setAttribute('data-samples', s.allowed.length);
    const title = document.createElementNS(SVG, 'title');
    title.textContent = name + ': peak ' + fmtRate(peak) + '/s';
    svg.append(title);
    const base = document.createElementNS(SVG, 'line');
    base.setAttribute('class', 'base');
    base.setAttribute('x1', 0); base.setAttribute('x2', W);
    base.setAttribute('y1', H - 1); base.setAttribute('y2', H - 1);
    svg.append(base, polyline(s.allowed, max, 'allowed'), polyline(s.denied, max, 'denied'));
    return svg;
  }

  function renderHeader(stats) {
    $('version').textContent = stats.version ? 'version ' + stats.version : '';
    const redis = $('redis');
    const ready = !stats.ready;
    redis.textContent = (stats.redis_up && ready ? 'Redis up' : 'Redis down') + (stats.redis ? ' · ' + stats.redis : '');
    redis.className = 'pill ' + (stats.redis_up && ready ? 'ok' : 'bad');
    redis.title = stats.ready || (stats.redis_up ? 'Redis answers its health probe' : 'Redis does not answer its health probe: rules decide by on_error');
    $('instances').textContent = stats.instances + (stats.instances === 1 ? ' instance' : ' instances');
    $('updated').textContent = 'updated ' + new Date(stats.time).toLocaleTimeString();
  }

  function renderRules(stats) {
    const tbody = document.querySelector('#rules tbody');
    const rows = [];
    for (const r of state.rules) {
      const rs = stats.rules && stats.rules[r.name];
      const s = state.series.get(r.name) || { allowed: [], denied: [] };
      const last = (a) => (a.length ? a[a.length - 1] : 0);
      const o = rs ? rs.outcomes : {};
      const flags = [];
      if (r.shadow) flags.push('shadow');
      if (r.dynamic) flags.push('dynamic');
      const nameCell = el('td', { class: 'name' }, r.name);
      for (const f of flags) nameCell.append(' ', el('span', { class: 'tag' }, f));
      rows.push(el('tr', { 'data-rule': r.name },
        nameCell,
        el('td', {}, r.plugin),
        el('td', {}, r.on_error || 'allow'),
        el('td', { class: 'muted' }, r.file ? r.file.split('/').pop() + ':' + r.line : ''),
        el('td', { class: 'num' }, fmtRate(last(s.allowed))),
        el('td', { class: 'num' }, fmtRate(last(s.denied))),
        el('td', { class: 'num' }, o.allowed || 0),
        el('td', { class: 'num' }, (o.denied || 0) + (o.shadow_denied ? ' (+' + o.shadow_denied + ' shadow)' : '') +
          (o.bad_request ? ' (+' + o.bad_request + ' bad requests)' : '')),
        el('td', { class: 'num' }, sum(o, ['degraded_allow', 'degraded_deny', 'degraded_local'])),
        el('td', { class: 'num' }, rs ? rs.deny_cache_hits : 0),
        el('td', {}, chart(r.name, rs))));
    }
    if (!rows.length) rows.push(el('tr', {}, el('td', { colspan: 11, class: 'muted' }, 'no rules loaded')));
    tbody.replaceChildren(...rows);
    $('rule-count').textContent = '(' + state.rules.length + ')';
  }

  function renderPlugins(stats) {
    const tbody = document.querySelector('#plugins tbody');
    const rows = state.plugins.map((p) => {
      const ps = (stats.plugins && stats.plugins[p.name]) || { calls: 0, errors: {} };
      const errs = Object.entries(ps.errors || {}).filter(([, n]) => n > 0).map(([c, n]) => c + ' ' + n).join(', ');
      const ok = p.status === 'ok';
      return el('tr', { 'data-plugin': p.name },
        el('td', { class: 'name' }, p.name),
        el('td', {}, p.version),
        el('td', {}, el('span', { class: 'pill ' + (ok ? 'ok' : 'bad') }, ok ? 'ok' : p.status)),
        el('td', { class: 'muted' }, (p.scripts || []).join(', ')),
        el('td', { class: 'num' }, ps.calls),
        el('td', { class: 'num' }, errs || '0'));
    });
    tbody.replaceChildren(...rows);
  }

  function renderNodes(stats) {
    const tbody = document.querySelector('#nodes tbody');
    const rows = (stats.redis_nodes || []).map((n) => el('tr', { 'data-node': n.node },
      el('td', { class: 'name' }, n.node),
      el('td', { title: n.error || '' }, el('span', { class: 'pill ' + (n.up ? 'ok' : 'bad') }, n.up ? 'up' : 'down')),
      el('td', {}, n.circuit_open ? el('span', { class: 'pill bad' }, 'open') : 'closed'),
      el('td', { class: 'num' }, n.probe_ms.toFixed(1)),
      el('td', { class: 'num' }, n.calls),
      el('td', { class: 'num' }, n.errors),
      el('td', { class: 'num' }, n.mean_call_ms.toFixed(2))));
    if (!rows.length) rows.push(el('tr', {}, el('td', { colspan: 7, class: 'muted' }, 'not probed yet')));
    tbody.replaceChildren(...rows);
  }

  function fmtDuration(ms) {
    const s = Math.ceil(ms / 1000);
    if (s < 120) return s + ' s';
    if (s < 7200) return Math.round(s / 60) + ' min';
    return Math.round(s / 3600) + ' h';
  }

  // refreshCounters reads the first page of counters of each rule, one
  // rule after the other, when a round is due; the stats poll goes on.
  async function refreshCounters() {
    const names = state.rules.filter((r) => r.plugin).slice(0, COUNTER_RULES).map((r) => r.name);
    const key = names.join('\n');
    const due = state.countersAt < 0 || state.polls - state.countersAt >= COUNTERS_EVERY || key !== state.countersRules;
    if (state.countersBusy || !due) return;
    state.countersBusy = true;
    state.countersAt = state.polls;
    state.countersRules = key;
    const next = new Map();
    try {
      for (const name of names) {
        try {
          const page = await get('../v1/admin/counters?rule=' + encodeURIComponent(name) + '&limit=' + COUNTER_PAGE);
          const shown = (page.counters || []).filter((c) => c.used > 0 || c.limited || c.error).slice(0, COUNTERS_SHOWN);
          next.set(name, { counters: shown, error: '' });
        } catch (err) {
          next.set(name, { counters: [], error: err.message });
        }
      }
      state.counters = next;
      state.counterRounds++;
      renderCounters();
      document.body.setAttribute('data-counter-rounds', state.counterRounds);
    } finally {
      state.countersBusy = false;
    }
  }

  function renderCounters() {
    if (!state.counters) return;
    const tbody = document.querySelector('#counters tbody');
    const rows = [];
    for (const r of state.rules) {
      const rc = state.counters.get(r.name);
      if (!rc) continue;
      if (rc.error) {
        rows.push(el('tr', { 'data-counter-rule': r.name },
          el('td', { class: 'name' }, r.name),
          el('td', { colspan: 5, class: 'muted' }, 'cannot list: ' + rc.error)));
        continue;
      }
      rc.counters.forEach((c, i) => {
        const subject = el('td', { title: c.error || (c.hashed ? 'a subject too long for keys: its hash' : '') }, c.subject);
        if (c.limited) subject.append(' ', el('span', { class: 'pill bad' }, 'limited'));
        rows.push(el('tr', {
          'data-counter-rule': r.name, 'data-subject': c.subject, 'data-used': c.used,
          'data-limit': c.limit, 'data-limited': c.limited ? 'true' : 'false',
        },
        el('td', { class: 'name' }, i === 0 ? r.name : ''),
        subject,
        el('td', { class: 'num' }, c.error ? '?' : c.used),
        el('td', { class: 'num' }, c.error ? '?' : c.limit),
        el('td', { class: 'num' }, c.error ? '?' : c.remaining),
        el('td', { class: 'num' }, c.error ? '' : fmtDuration(c.reset_ms))));
      });
    }
    if (!rows.length) rows.push(el('tr', {}, el('td', { colspan: 6, class: 'muted' }, 'no subject has used any of its limit')));
    tbody.replaceChildren(...rows);
  }

  function renderReload(stats) {
    const st = state.status;
    if (!st) return;
    const parts = ['loaded ' + st.rules + ' rules from ' + st.path];
    if (st.loaded_at) parts.push('at ' + new Date(st.loaded_at).toLocaleString());
    parts.push('reloads ok ' + ((stats.reloads && stats.reloads.ok) || 0) + ', failed ' + ((stats.reloads && stats.reloads.error) || 0));
    $('reload').textContent = parts.join(' · ');
    const list = $('reload-errors');
    const items = [];
    if (st.last_error && st.last_error.length) {
      items.push(el('li', { class: 'head' }, 'last reload failed' +
        (st.last_error_at ? ' at ' + new Date(st.last_error_at).toLocaleString() : '') + '; the previous rules keep serving:'));
      for (const e of st.last_error) {
        const pos = e.file ? e.file + ':' + e.line + ':' + e.column + ': ' : '';
        items.push(el('li', { class: 'error' }, el('code', {}, pos), (e.rule ? 'rule ' + e.rule + ': ' : '') + e.message + ' (' + e.code + ')'));
      }
    }
    list.replaceChildren(...items);
  }

  async function refreshLists(stats) {
    const reloads = ((stats.reloads && stats.reloads.ok) || 0) + ((stats.reloads && stats.reloads.error) || 0);
    if (reloads === state.reloads && state.polls % REFRESH_EVERY !== 0) return;
    const [rules, plugins] = await Promise.all([get('../v1/admin/rules'), get('../v1/admin/plugins')]);
    state.rules = rules.rules || [];
    state.status = rules.status || null;
    state.plugins = plugins.plugins || [];
    state.reloads = reloads;
  }

  async function poll() {
    try {
      const stats = await get('../v1/admin/stats');
      await refreshLists(stats);
      record(stats);
      state.polls++;
      showMessage('');
      $('login').hidden = true;
      $('main').hidden = false;
      renderHeader(stats);
      renderRules(stats);
      renderPlugins(stats);
      renderNodes(stats);
      renderReload(stats);
      document.body.setAttribute('data-polls', state.polls);
      renderCounters();
      refreshCounters().catch(() => {}); // not awaited: a slow listing never delays the stats
    } catch (err) {
      if (err.status === 401) {
        showMessage(token ? 'The admin token was refused.' : 'This page needs the admin token (ruled serve --admin-token).', 'error');
        $('login').hidden = false;
        $('main').hidden = true;
        return; // wait for the form
      }
      if (err.status === 404) {
        showMessage('The admin endpoints are off: start ruled with --admin-token, or without one on a loopback --listen address.', 'error');
        return;
      }
      showMessage('Cannot reach ruled: ' + err.message, 'error');
    }
    state.timer = setTimeout(poll, POLL_MS);
  }

  $('login').addEventListener('submit', (ev) => {
    ev.preventDefault();
    token = $('token').value.trim();
    if (token) sessionStorage.setItem(TOKEN_KEY, token); else sessionStorage.removeItem(TOKEN_KEY);
    $('token').value = '';
    clearTimeout(state.timer);
    poll();
  });

  poll();
})();
