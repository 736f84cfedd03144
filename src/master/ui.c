/*
 * ui.c - the job's dashboard: one page (web/index.html) and its script, style and Chart.js
 * (Debian's libjs-chart.js), built into the binary (cmake/embed.cmake) so that it works with
 * no network. The page reads the job's API with the token it takes from the URL's fragment
 * (`dtrain run` prints http://HOST:PORT/#token=...); the fragment never reaches a server,
 * and these answers forbid other origins from framing or scripting the page
 * (docs/DASHBOARD.md).
 */
#include <stdlib.h>
#include <string.h>

#include "master/master-impl.h"

extern const unsigned char dt__asset_index_html[], dt__asset_app_js[], dt__asset_app_css[],
    dt__asset_chart_js[];
extern const size_t dt__asset_index_html_len, dt__asset_app_js_len, dt__asset_app_css_len,
    dt__asset_chart_js_len;

static void serve(dt__http_resp *resp, const unsigned char *data, size_t len, const char *type) {
    free(resp->body);
    resp->body = malloc(len ? len : 1);
    if (!resp->body) return dt__http_resp_error(resp, 500, "out of memory");
    memcpy(resp->body, data, len);
    resp->len = len;
    resp->status = 200;
    resp->content_type = type;
    dt__http_resp_header(resp, "Content-Security-Policy",
                         "default-src 'self'; style-src 'self' 'unsafe-inline'; frame-ancestors 'none'; "
                         "base-uri 'none'");
    dt__http_resp_header(resp, "X-Content-Type-Options", "nosniff");
    dt__http_resp_header(resp, "Referrer-Policy", "no-referrer");
    dt__http_resp_header(resp, "Cache-Control", "no-cache");
}

void dt__ui_page(void *ctx, const dt__http_req *req, dt__http_resp *resp) {
    (void)ctx;
    (void)req;
    serve(resp, dt__asset_index_html, dt__asset_index_html_len, "text/html; charset=utf-8");
}

void dt__ui_asset(void *ctx, const dt__http_req *req, dt__http_resp *resp) {
    (void)ctx;
    const char *f = dt__http_req_param(req, "file");
    if (f && !strcmp(f, "app.js"))
        serve(resp, dt__asset_app_js, dt__asset_app_js_len, "text/javascript; charset=utf-8");
    else if (f && !strcmp(f, "app.css"))
        serve(resp, dt__asset_app_css, dt__asset_app_css_len, "text/css; charset=utf-8");
    else if (f && !strcmp(f, "chart.min.js"))
        serve(resp, dt__asset_chart_js, dt__asset_chart_js_len, "text/javascript; charset=utf-8");
    else if (!f && !strcmp(req->path, "/favicon.ico")) /* browsers ask: nothing to show */
        resp->status = 204;
    else
        dt__http_resp_error(resp, 404, "no such file: /ui/%.100s", f ? f : "");
}
