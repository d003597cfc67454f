// Type-aware linting (typescript-eslint strictTypeChecked) of the services' and
// libraries' TypeScript. Types come from each package's tsconfig.json (src) and
// from services/tsconfig.json and libs/tsconfig.json (tests), found by the
// project service; other packages are seen through their built declarations,
// so `npm run lint` builds first. Import cycles are refused by
// libs/testing/test/import-cycles.unit.test.ts (dpdm, part of the unit tests).
// The relaxed rules and why: docs/decisions/027-lint.md.
import eslint from '@eslint/js';
import prettier from 'eslint-config-prettier';
import tseslint from 'typescript-eslint';

export default tseslint.config(
  {
    ignores: [
      '**/dist/**',
      '**/node_modules/**',
      'libs/contracts/src/lab/**',
      'libs/contracts/src/google/**',
      // type-checked by client.e2e.test.ts against the schema it generates first; without that file every type is any
      'services/gateway/test/client/scenario.ts',
    ],
  },
  {
    files: ['services/*/{src,test}/**/*.ts', 'libs/*/{src,test}/**/*.ts'],
    extends: [eslint.configs.recommended, ...tseslint.configs.strictTypeChecked],
    languageOptions: {
      parserOptions: { projectService: true, tsconfigRootDir: import.meta.dirname },
    },
    linterOptions: { reportUnusedDisableDirectives: 'error' },
    rules: {
      // Numbers in messages and SQL fragments are the common case and print as expected.
      '@typescript-eslint/restrict-template-expressions': ['error', { allowNumber: true }],
      // `!` marks invariants the types cannot carry (the row INSERT ... RETURNING gave back).
      '@typescript-eslint/no-non-null-assertion': 'off',
      // `() => resolve()` style callbacks return nothing anyone reads.
      '@typescript-eslint/no-confusing-void-expression': ['error', { ignoreArrowShorthand: true }],
      // `async` states the contract (a throw becomes a rejection) where an interface wants a Promise.
      '@typescript-eslint/require-await': 'off',
      // `Promise<Outcome | void>` is how an interface lets an implementation return nothing.
      '@typescript-eslint/no-invalid-void-type': 'off',
      // The codebase's convention: a leading underscore names what is deliberately unused.
      '@typescript-eslint/no-unused-vars': [
        'error',
        { argsIgnorePattern: '^_', varsIgnorePattern: '^_', caughtErrorsIgnorePattern: '^_', ignoreRestSiblings: true },
      ],
    },
  },
  {
    files: ['services/*/test/**/*.ts', 'libs/*/test/**/*.ts'],
    rules: {
      // Tests read untyped JSON answers and check them with expect(): the assertion is the type check.
      '@typescript-eslint/no-unsafe-member-access': 'off',
      '@typescript-eslint/no-unsafe-assignment': 'off',
      '@typescript-eslint/no-unsafe-argument': 'off',
      '@typescript-eslint/no-unsafe-return': 'off',
      '@typescript-eslint/no-unsafe-call': 'off',
      '@typescript-eslint/no-explicit-any': 'off',
      // afterAll cleans up what a failed beforeAll may not have made (`await stack?.stop()`).
      '@typescript-eslint/no-unnecessary-condition': 'off',
      // A test knows what the call it provokes rejects with: `.catch((e: DomainError) => e.kind)`.
      '@typescript-eslint/use-unknown-in-catch-callback-variable': 'off',
    },
  },
  prettier,
);
