import { Metadata } from '@grpc/grpc-js';
// the object grpc-js hands a unary handler; not part of its public API, hence this test
import { ServerWritableStreamImpl } from '@grpc/grpc-js/build/src/server-call';
import { releaseAnsweredCall } from '../src/answered-call';

/** A transport call that records what is asked of it. */
function transport() {
  const asked: string[] = [];
  const record = (name: string) => () => void asked.push(name);
  return { asked, call: { sendStatus: record('sendStatus'), sendMessage: record('sendMessage'), sendMetadata: record('sendMetadata'), getPeer: () => 'peer' } };
}

describe('releaseAnsweredCall', () => {
  it("drops grpc-js's call object's request, metadata and transport call", () => {
    const { call } = transport();
    const answered = new ServerWritableStreamImpl('/lab.Test/Get', call as never, new Metadata(), { id: 'x' });
    releaseAnsweredCall(answered);
    expect(answered.request).toBeUndefined();
    expect(answered.metadata).toBeUndefined();
    expect((answered as unknown as { call: unknown }).call).not.toBe(call);
  });

  it('leaves a call object that grpc-js may still end or signal without failing, and without reaching the call', async () => {
    const { asked, call } = transport();
    const answered = new ServerWritableStreamImpl('/lab.Test/Get', call as never, new Metadata(), { id: 'x' });
    releaseAnsweredCall(answered);
    // grpc-js ends the object on 'error' (its _final sends a status); a cancel flags and signals it
    answered.emit('error', new Error('late'));
    answered.emit('cancelled', 'cancelled');
    await new Promise((resolve) => setImmediate(resolve));
    expect(answered.getPeer()).toBe('unknown');
    expect(asked).toEqual([]);
  });
});
