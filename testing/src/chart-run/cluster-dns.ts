import { createSocket, type Socket } from 'node:dgram';
import * as packet from 'dns-packet';

/**
 * The cluster's DNS for the chart runner, as CoreDNS answers a pod: A records of
 * the names the release resolves (its Services, to the Ready pods behind them;
 * the outside hosts the test declares), NXDOMAIN for anything else, so a lookup
 * never leaves the machine. The pods' /etc/resolv.conf names it. Processes that
 * ask DNS directly (c-ares, as the webhook delivery guard does) and those that go
 * through getaddrinfo and the hosts file then see the same answers.
 */
export class ClusterDns {
  private constructor(
    private readonly socket: Socket,
    readonly address: string,
  ) {}

  /** Serves `answer(name)` (addresses, or undefined: no such name) on `address`:53/udp. */
  static async start(address: string, answer: (name: string) => string[] | undefined): Promise<ClusterDns> {
    const socket = createSocket('udp4');
    socket.on('message', (msg, peer) => {
      let query: packet.Packet;
      try {
        query = packet.decode(msg);
      } catch {
        return; // not DNS: no answer, as a server would
      }
      const question = query.questions?.[0];
      if (!question) return;
      const addresses = answer(question.name.toLowerCase().replace(/\.$/, ''));
      const reply = packet.encode({
        id: query.id,
        type: 'response',
        // RD copied, RA set; NXDOMAIN (rcode 3) for a name the cluster does not know
        flags: (packet.RECURSION_DESIRED & (query.flags ?? 0)) | packet.RECURSION_AVAILABLE | (addresses ? 0 : 3),
        questions: [question],
        // only A records: the pods have IPv4 addresses; a known name answers other types with no record
        answers: addresses && question.type === 'A' ? addresses.map((data) => ({ type: 'A' as const, name: question.name, ttl: 5, data })) : [],
      });
      socket.send(reply, peer.port, peer.address);
    });
    await new Promise<void>((resolve, reject) => {
      socket.once('error', reject);
      socket.bind(53, address, () => resolve());
    });
    return new ClusterDns(socket, address);
  }

  close(): Promise<void> {
    return new Promise((resolve) => this.socket.close(() => resolve()));
  }
}
