import { Server, ServerCredentials } from '@grpc/grpc-js';
import { connect, type Http2Session } from 'node:http2';
import { http2ServersOf } from '../src/adapters/grpc-js';
import { waitFor } from '../../../testing/src/waits';

/** Guards the grpc-js adapter (decision 055): fails when `Server#http2Servers` is gone or changed. */
describe('grpc-js adapter: Server#http2Servers', () => {
  const server = new Server();
  afterAll(() => server.forceShutdown());

  it('gives the listening http2 server, whose sessions can be tuned', async () => {
    const port = await new Promise<number>((resolve, reject) =>
      server.bindAsync('127.0.0.1:0', ServerCredentials.createInsecure(), (err, p) => (err ? reject(err) : resolve(p))),
    );
    const servers = http2ServersOf(server);
    expect(servers).toHaveLength(1);
    const sessions: Http2Session[] = [];
    servers[0]!.on('session', (s) => sessions.push(s));
    const client = connect(`http://127.0.0.1:${port}`);
    // the server's shutdown ends the session with an error: not this test's subject
    client.on('error', () => undefined);
    try {
      const session = await waitFor('a server session', () => sessions[0]);
      expect(typeof session.setLocalWindowSize).toBe('function');
      session.setLocalWindowSize(8 * 1024 * 1024);
      expect(session.state.effectiveLocalWindowSize).toBe(8 * 1024 * 1024);
    } finally {
      client.destroy();
    }
  });

  it('throws when the field is not there', () => {
    expect(() => http2ServersOf({} as unknown as Server)).toThrow(/grpc-js adapter/);
    expect(() => http2ServersOf({ http2Servers: new Map([[{}, {}]]) } as unknown as Server)).toThrow(/grpc-js adapter/);
  });
});
