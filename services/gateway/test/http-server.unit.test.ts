import type { AddressInfo } from 'node:net';
import express from 'express';
import { createExpressServer } from '../src/http-server.js';

// The server makes requests and responses with the app's prototypes, so that
// express's own Object.setPrototypeOf on arrival changes nothing (http-server.ts:
// a prototype changed after the object was made kept every request's objects
// alive through V8's scavenges). What express gives a handler stays the same.
describe('createExpressServer', () => {
  const app = express();
  app.use(express.json());
  const seen: { reqProto: boolean; resProto: boolean }[] = [];
  app.post('/things/:id', (req, res) => {
    seen.push({ reqProto: Object.getPrototypeOf(req) === app.request, resProto: Object.getPrototypeOf(res) === app.response });
    res
      .status(201)
      .set('X-Seen', req.get('x-probe') ?? '')
      .json({ id: req.params.id, path: req.path, body: req.body as unknown, query: req.query });
  });
  app.get('/plain', (_req, res) => res.end('ok'));
  const server = createExpressServer(app);
  let base = '';

  beforeAll(async () => {
    await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
    base = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
  });
  afterAll(async () => {
    server.closeAllConnections();
    await new Promise((resolve) => server.close(resolve));
  });

  it('makes requests and responses with the app prototypes from the start', async () => {
    const prototypes: unknown[] = [];
    const onRequest = (req: object, res: object) => prototypes.push(Object.getPrototypeOf(req), Object.getPrototypeOf(res));
    // node's 'request' listeners run before express's: the prototype is already the app's
    server.prependListener('request', onRequest);
    try {
      const r = await fetch(`${base}/plain`);
      expect(await r.text()).toBe('ok');
    } finally {
      server.off('request', onRequest);
    }
    expect(prototypes).toEqual([app.request, app.response]);
  });

  it('serves express as before: params, path, query, JSON body, helpers', async () => {
    const r = await fetch(`${base}/things/a1?x=2`, {
      method: 'POST',
      headers: { 'content-type': 'application/json', 'x-probe': 'p' },
      body: JSON.stringify({ n: 1 }),
    });
    expect(r.status).toBe(201);
    expect(r.headers.get('x-seen')).toBe('p');
    expect(await r.json()).toEqual({ id: 'a1', path: '/things/a1', body: { n: 1 }, query: { x: '2' } });
    expect(seen.at(-1)).toEqual({ reqProto: true, resProto: true });
  });

  it('keeps connections alive across requests (one socket, several requests)', async () => {
    for (let i = 0; i < 3; i++) expect((await fetch(`${base}/plain`)).status).toBe(200);
  });
});
