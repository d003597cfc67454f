import type { IncomingMessage, Server, ServerResponse } from 'node:http';
import type { Duplex } from 'node:stream';

/**
 * Requests Node's HTTP parser refuses before express sees them (headers over
 * the size limit, malformed request lines) would otherwise get a bare status
 * line; clients get the API's error envelope there too (found by the fuzz test).
 * Node's other answer before express, a bare 417 to an unknown Expect, is not given.
 */
export function answerClientErrorsWithEnvelope(server: Server): void {
  // An Expect other than 100-continue: RFC 9110 (10.1.1) lets a server refuse it with
  // 417 or not. Node's 417 is bare, outside the envelope and the document; the request
  // is served as if the field were not there (100-continue itself Node answers).
  server.on('checkExpectation', (req: IncomingMessage, res: ServerResponse) => server.emit('request', req, res));
  server.on('clientError', (err: NodeJS.ErrnoException, socket: Duplex) => {
    if (err.code === 'ECONNRESET' || !socket.writable) {
      socket.destroy();
      return;
    }
    const [status, reason, code, message] =
      err.code === 'HPE_HEADER_OVERFLOW'
        ? [431, 'Request Header Fields Too Large', 'headers_too_large', 'request headers (or URL) are too large']
        : err.code === 'ERR_HTTP_REQUEST_TIMEOUT'
          ? [408, 'Request Timeout', 'request_timeout', 'the request was not received in time']
          : [400, 'Bad Request', 'bad_request', 'malformed HTTP request'];
    const body = JSON.stringify({ error: { code, message } });
    socket.end(
      `HTTP/1.1 ${status} ${reason}\r\nContent-Type: application/json; charset=utf-8\r\nContent-Length: ${Buffer.byteLength(body)}\r\nConnection: close\r\n\r\n${body}`,
    );
  });
}
