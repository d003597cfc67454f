import http2, { type ClientHttp2Stream, type ServerHttp2Stream } from 'node:http2';
import type { AddressInfo } from 'node:net';
import { releaseClosedHttp2Streams } from '../src/http2-release.js';

// A closed HTTP/2 stream lets go of its listeners one turn after its 'close'
// (http2-release.ts: on Node.js 24 closed streams stayed reachable through
// scavenges, and with them every call their listeners reached). Until then the
// stream works as usual: its data, end and close reach every listener.
describe('releaseClosedHttp2Streams', () => {
  let server: http2.Http2Server;
  let session: http2.ClientHttp2Session;
  const served: ServerHttp2Stream[] = [];

  beforeAll(async () => {
    releaseClosedHttp2Streams();
    releaseClosedHttp2Streams(); // once per process, whatever the calls
    server = http2.createServer();
    server.on('stream', (stream) => {
      served.push(stream);
      stream.on('data', () => undefined);
      stream.on('end', () => {
        stream.respond({ ':status': 200 });
        stream.end('answer');
      });
    });
    await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
    session = http2.connect(`http://127.0.0.1:${(server.address() as AddressInfo).port}`);
  });
  afterAll(async () => {
    session.close();
    await new Promise((resolve) => server.close(resolve));
  });

  const turn = () => new Promise((resolve) => setImmediate(resolve));
  const listeners = (s: ClientHttp2Stream | ServerHttp2Stream) => s.eventNames().reduce((n, e) => n + s.listenerCount(e), 0);

  it('delivers the answer and every close listener, then drops the listeners of both ends', async () => {
    const req = session.request({ ':method': 'POST', ':path': '/' });
    let body = '';
    req.setEncoding('utf8');
    req.on('data', (c: string) => (body += c));
    const events: string[] = [];
    req.on('end', () => events.push('end'));
    const closed = new Promise<void>((resolve) =>
      req.on('close', () => {
        events.push('close');
        resolve();
      }),
    );
    req.once('close', () => events.push('second close listener'));
    req.end('question');
    await closed;
    expect(body).toBe('answer');
    expect(events).toEqual(['end', 'close', 'second close listener']);
    expect(listeners(req)).toBeGreaterThan(0);
    await turn();
    await turn();
    expect(listeners(req)).toBe(0);
    const s = served.at(-1)!;
    expect(s.closed).toBe(true);
    expect(listeners(s)).toBe(0);
  });

  it('adds one listener per stream, however many times it is installed or loaded', async () => {
    jest.isolateModules(() => {
      // a second copy of the module, as a test runner's registry per file loads it
      // eslint-disable-next-line @typescript-eslint/no-require-imports
      (require('../src/http2-release.js') as typeof import('../src/http2-release.js')).releaseClosedHttp2Streams();
    });
    const req = session.request({ ':method': 'POST', ':path': '/' });
    req.resume();
    const closeListeners = new Promise<number>((resolve) => req.on('close', () => resolve(req.listenerCount('close'))));
    req.end();
    // ours and this test's
    expect(await closeListeners).toBe(2);
  });

  it('leaves a stream that is still open alone', async () => {
    const req = session.request({ ':method': 'POST', ':path': '/' });
    req.on('data', () => undefined);
    req.write('part');
    await turn();
    await turn();
    expect(req.listenerCount('data')).toBe(1);
    const closed = new Promise((resolve) => req.on('close', resolve));
    req.end();
    await closed;
  });
});
