import { AsyncLocalStorage, AsyncResource, executionAsyncId } from 'node:async_hooks';
import { useLeanAsyncResourceBind } from '../src/async-bind';

const original = Object.getOwnPropertyDescriptor(AsyncResource.prototype, 'bind')!;

describe('the lean AsyncResource#bind', () => {
  beforeAll(() => useLeanAsyncResourceBind());
  afterAll(() => Object.defineProperty(AsyncResource.prototype, 'bind', original));

  it('is installed once, on the class node:http2 uses', () => {
    const bindOf = () => Object.getOwnPropertyDescriptor(AsyncResource.prototype, 'bind')!.value as unknown;
    const installed = bindOf();
    expect(installed).not.toBe(original.value);
    useLeanAsyncResourceBind();
    expect(bindOf()).toBe(installed);
  });

  it("runs the function in the resource's scope, with its context, as Node's does", async () => {
    const als = new AsyncLocalStorage<string>();
    const resource = als.run('at bind', () => new AsyncResource('Test'));
    const seen = await als.run('at call', async () => {
      const bound = resource.bind(() => ({ id: executionAsyncId(), store: als.getStore() }));
      await Promise.resolve();
      return bound();
    });
    expect(seen).toEqual({ id: resource.asyncId(), store: 'at bind' });
  });

  it('passes this, the arguments and the answer through, and keeps the length', () => {
    const resource = new AsyncResource('Test');
    function add(this: { base: number }, a: number, b: number) {
      return this.base + a + b;
    }
    const free = resource.bind(add);
    expect(free.call({ base: 1 }, 2, 3)).toBe(6);
    const fixed = resource.bind(add, { base: 10 });
    expect(fixed.call({ base: 1 }, 2, 3)).toBe(15);
    expect([free.length, fixed.length]).toEqual([2, 2]);
    expect(AsyncResource.bind((x: number) => x * 2)(21)).toBe(42);
  });

  it('leaves out only the deprecated asyncResource property', () => {
    const bound = new AsyncResource('Test').bind(() => 1);
    expect('asyncResource' in bound).toBe(false);
    expect(() => new AsyncResource('Test').bind(42 as unknown as () => void)).toThrow(TypeError);
  });
});
