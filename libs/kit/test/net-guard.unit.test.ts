import { createSocket, type Socket } from 'node:dgram';
import type { LookupAddress } from 'node:dns';
import { dnsResolver } from '../src/net-guard';

/**
 * A name server on loopback: `answer` decides per query type (1 = A, 28 = AAAA)
 * what comes back, or nothing at all (a DNS that never answers).
 */
async function fakeDns(answer: (qtype: number) => { rcode: number; a?: string } | undefined): Promise<{ server: string; queries: number[]; close(): void }> {
  const sock: Socket = createSocket('udp4');
  const queries: number[] = [];
  sock.on('message', (q, peer) => {
    let i = 12;
    while (q[i]) i += q[i]! + 1;
    const qtype = q.readUInt16BE(i + 1);
    queries.push(qtype);
    const a = answer(qtype);
    if (!a) return;
    const question = q.subarray(12, i + 5);
    const header = Buffer.alloc(12);
    q.copy(header, 0, 0, 2); // the query's id
    header.writeUInt16BE(0x8180 | a.rcode, 2); // response, recursion desired and available
    header.writeUInt16BE(1, 4);
    header.writeUInt16BE(a.a ? 1 : 0, 6);
    const record = a.a ? Buffer.concat([Buffer.from([0xc0, 0x0c, 0, 1, 0, 1, 0, 0, 0, 60, 0, 4]), Buffer.from(a.a.split('.').map(Number))]) : Buffer.alloc(0);
    sock.send(Buffer.concat([header, question, record]), peer.port, peer.address);
  });
  await new Promise<void>((resolve) => sock.bind(0, '127.0.0.1', resolve));
  return { server: `127.0.0.1:${sock.address().port}`, queries, close: () => sock.close() };
}

const A = 1;

describe('dnsResolver', () => {
  const fallbackCalls: string[] = [];
  const fallback = async (host: string): Promise<LookupAddress[]> => {
    fallbackCalls.push(host);
    return [{ address: '192.0.2.7', family: 4 }];
  };
  beforeEach(() => {
    fallbackCalls.length = 0;
  });

  it('answers from DNS (A records, no AAAA)', async () => {
    const dns = await fakeDns((qtype) => (qtype === A ? { rcode: 0, a: '93.184.216.34' } : { rcode: 0 }));
    try {
      const resolve = dnsResolver({ servers: [dns.server], fallback });
      await expect(resolve('receiver.example')).resolves.toEqual([{ address: '93.184.216.34', family: 4 }]);
      expect(fallbackCalls).toEqual([]);
    } finally {
      dns.close();
    }
  });

  it('fails on a DNS that never answers after its own timeout, without the system lookup', async () => {
    const dns = await fakeDns(() => undefined);
    try {
      const resolve = dnsResolver({ servers: [dns.server], timeoutMs: 100, tries: 1, fallback });
      await expect(resolve('silent.example')).rejects.toMatchObject({ code: 'ETIMEOUT' });
      expect(dns.queries.length).toBeGreaterThan(0);
      expect(fallbackCalls).toEqual([]);
    } finally {
      dns.close();
    }
  });

  it('hands a name DNS does not know to the system lookup (hosts file, search domains)', async () => {
    const dns = await fakeDns(() => ({ rcode: 3 })); // NXDOMAIN
    try {
      const resolve = dnsResolver({ servers: [dns.server], fallback });
      await expect(resolve('receiver.other-namespace')).resolves.toEqual([{ address: '192.0.2.7', family: 4 }]);
      expect(fallbackCalls).toEqual(['receiver.other-namespace']);
    } finally {
      dns.close();
    }
  });

  it('knows localhost without asking anyone', async () => {
    const dns = await fakeDns(() => ({ rcode: 3 }));
    try {
      const resolve = dnsResolver({ servers: [dns.server], fallback });
      await expect(resolve('localhost')).resolves.toEqual([
        { address: '127.0.0.1', family: 4 },
        { address: '::1', family: 6 },
      ]);
      expect(dns.queries).toEqual([]);
      expect(fallbackCalls).toEqual([]);
    } finally {
      dns.close();
    }
  });
});
