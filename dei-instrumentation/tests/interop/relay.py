"""An HTTP relay instrumented with the standard OpenTelemetry Python SDK only (no DEI code).

It extracts the incoming trace context and baggage with the default global propagators (W3C trace context and
W3C baggage), serves the request in a SERVER span, and calls the downstream service with the context injected
again. A `dei` baggage entry therefore reaches the downstream service unchanged.

Usage: python3 relay.py DOWNSTREAM_BASE_URL   (prints the port it listens on, then serves)
"""

import sys
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from opentelemetry import context, propagate, trace
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider

trace.set_tracer_provider(TracerProvider(resource=Resource.create({"service.name": "py-relay"})))
tracer = trace.get_tracer("dei-interop-relay")
DOWNSTREAM = sys.argv[1].rstrip("/")


class Relay(BaseHTTPRequestHandler):
    def do_GET(self):
        carrier = {k.lower(): v for k, v in self.headers.items()}
        # What OpenTelemetry's own server instrumentations do: attach the extracted context (trace context
        # and baggage), then open the server span in it.
        token = context.attach(propagate.extract(carrier))
        try:
            with tracer.start_as_current_span("relay", kind=trace.SpanKind.SERVER):
                outgoing = {}
                propagate.inject(outgoing)
                request = urllib.request.Request(DOWNSTREAM + self.path, headers=outgoing)
                with urllib.request.urlopen(request, timeout=10) as response:
                    body = response.read()
                    status = response.status
        finally:
            context.detach(token)
        self.send_response(status)
        self.send_header("content-type", "text/plain")
        self.send_header("content-length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


def main():
    server = ThreadingHTTPServer(("127.0.0.1", 0), Relay)
    print(server.server_address[1], flush=True)
    server.serve_forever()


if __name__ == "__main__":
    main()
