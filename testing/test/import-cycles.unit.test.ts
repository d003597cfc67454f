import { existsSync, readdirSync } from 'node:fs';
import { join, resolve } from 'node:path';
import { parseCircular, parseDependencyTree } from 'dpdm';

/**
 * No module of a service or library imports itself back through others: a
 * circle makes the load order decide what is undefined at start, and makes a
 * module impossible to read alone. Type-only imports are left out (they vanish
 * from the compiled code); so are the generated contracts.
 */
const root = resolve(__dirname, '../..');

/** Import circles among the files the globs (relative to the repository) name and what they import. */
async function circles(globs: string[], exclude: RegExp): Promise<string[][]> {
  const tree = await parseDependencyTree(globs, { context: root, transform: true, skipDynamicImports: true, include: /\.ts$/, exclude });
  return parseCircular(tree, true);
}

describe('import cycles', () => {
  it('finds a circle where there is one, and leaves type-only imports out (the check itself works)', async () => {
    // a.ts and b.ts import each other; c.ts imports a.ts for its type only
    const found = await circles(['testing/test/fixtures/import-cycle/*.ts'], /node_modules/);
    expect(found.map((c) => [...c].sort())).toEqual([['testing/test/fixtures/import-cycle/a.ts', 'testing/test/fixtures/import-cycle/b.ts']]);
  });

  it('has none in the services, the libraries and the harness', async () => {
    const globs = ['services', 'libs', 'services/gateway/packages']
      .flatMap((top) =>
        readdirSync(join(root, top))
          .filter((name) => name !== 'contracts' && name !== 'packages' && existsSync(join(root, top, name, 'src')))
          .map((name) => `${top}/${name}/src/**/*.ts`),
      )
      .concat('testing/src/**/*.ts');
    const found = await circles(globs, /node_modules|\/dist\/|\.d\.ts$/);
    expect(found.map((c) => c.join(' -> '))).toEqual([]);
  });
});
