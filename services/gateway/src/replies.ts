import type { Response } from 'express';
import { JSON_TYPE, type Reply } from '@lab/http-api';
import { recordCause, recordRefusal } from './server-errors.js';

/** Writes a reply to the response, and keeps the cause of a 5xx for the log line written when it has gone out. */
export function send(res: Response, reply: Reply): void {
  if (reply.cause) recordCause(res, reply.cause);
  else if (reply.status >= 400 && reply.status < 500) recordRefusal(res, reply.body);
  if (reply.headers) for (const [k, v] of Object.entries(reply.headers)) res.setHeader(k, v);
  res.status(reply.status);
  if (reply.stream) {
    if (reply.contentType) res.setHeader('Content-Type', reply.contentType);
    // HEAD: the GET's status and headers; a stream (events, an artifact) is not started
    if (res.req.method === 'HEAD') res.end();
    else reply.stream(res).catch(() => res.destroy());
    return;
  }
  if (reply.body === undefined || reply.status === 204) {
    res.end();
    return;
  }
  res.setHeader('Content-Type', reply.contentType ?? JSON_TYPE);
  res.end(reply.body);
}
