import { promises as fs } from 'node:fs';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { tempDir } from './support/fs.js';
import { runMur } from './support/processes.js';

/**
 * `mur config set|get`: upstream's six keys over `$MURMUR_HOME/config.yaml` (global, `-g`) and
 * `<cwd>/.murmur/config.yaml` (the project's), merged as upstream's §1.9.
 */
describe('mur config', () => {
  let scratch: { dir: string; cleanup: () => Promise<void> };
  let counter = 0;

  beforeAll(async () => {
    scratch = await tempDir('murmur-config-');
  });
  afterAll(async () => {
    await scratch.cleanup();
  });

  /** A fresh home and project directory for one test. */
  async function place() {
    const root = path.join(scratch.dir, `case-${++counter}`);
    const home = path.join(root, 'home');
    const project = path.join(root, 'project');
    await fs.mkdir(project, { recursive: true });
    const mur = (args: string[]) => runMur(['config', ...args], { cwd: project, env: { MURMUR_HOME: home } });
    return { home, project, mur, globalFile: path.join(home, 'config.yaml'), projectFile: path.join(project, '.murmur', 'config.yaml') };
  }

  it('writes the project file by default and the global one with -g, naming the file and never the value', async () => {
    const { mur, globalFile, projectFile } = await place();
    const project = await mur(['set', 'registry.default', 'local']);
    expect(project.code, project.stderr).toBe(0);
    expect(project.stdout.trim()).toBe(`Set registry.default in ${projectFile}`);
    expect(await fs.readFile(projectFile, 'utf8')).toContain('default: local');
    await expect(fs.stat(globalFile)).rejects.toThrow();
    const global = await mur(['set', '-g', 'inference.api_key', 'sk-very-secret']);
    expect(global.code, global.stderr).toBe(0);
    expect(global.stdout.trim()).toBe(`Set inference.api_key in ${globalFile}`);
    expect(global.stdout + global.stderr).not.toContain('sk-very-secret');
    expect(((await fs.stat(globalFile)).mode & 0o777).toString(8)).toBe('600');
    expect(((await fs.stat(path.dirname(globalFile))).mode & 0o777).toString(8)).toBe('700');
  });

  it("reads the project's value over the global one, the key only ever from the global file, and official by default", async () => {
    const { mur, projectFile } = await place();
    expect((await mur(['get', 'registry.default'])).stdout.trim()).toBe('official');
    await mur(['set', '-g', 'inference.model', 'global-model']);
    await mur(['set', '-g', 'registry.default', 'global-registry']);
    await mur(['set', 'inference.model', 'project-model']);
    expect((await mur(['get', 'inference.model'])).stdout.trim()).toBe('project-model');
    expect((await mur(['get', '-g', 'inference.model'])).stdout.trim()).toBe('global-model');
    expect((await mur(['get', 'registry.default'])).stdout.trim()).toBe('global-registry');
    // A project's key is refused before anything is written: it would never be read, and the
    // project's file travels with the project.
    const before = await fs.readFile(projectFile, 'utf8');
    const project = await mur(['set', 'inference.api_key', 'sk-project']);
    expect(project.code).toBe(1);
    expect(project.stderr).toContain(`error[E-CFG-003]: inference.api_key is only ever read from the global config; it is not written to ${projectFile}`);
    expect(project.stderr).toContain('hint: mur config set -g inference.api_key <key>');
    expect(await fs.readFile(projectFile, 'utf8')).toBe(before);
    const unset = await mur(['get', 'inference.api_key']);
    expect(unset.code).toBe(1);
    expect(unset.stdout).toBe('');
    await mur(['set', '-g', 'inference.api_key', 'sk-global']);
    const shown = await mur(['get', 'inference.api_key']);
    expect(shown.code).toBe(0);
    expect(shown.stdout).toContain('not shown');
    expect(shown.stdout).not.toContain('sk-');
  });

  it('keeps comments and every other key of a file it edits', async () => {
    const { mur, projectFile } = await place();
    await fs.mkdir(path.dirname(projectFile), { recursive: true });
    await fs.writeFile(projectFile, '# the team floor\ncontainment: scoped\nregistry:\n  index_url: https://example.invalid/index\n');
    expect((await mur(['set', 'registry.default', 'local'])).code).toBe(0);
    const text = await fs.readFile(projectFile, 'utf8');
    expect(text).toContain('# the team floor');
    expect(text).toContain('containment: scoped');
    expect(text).toContain('index_url: https://example.invalid/index');
    expect((await mur(['get', 'registry.index_url'])).stdout.trim()).toBe('https://example.invalid/index');
  });

  it('refuses a key it does not know with E-CFG-002 and the supported keys, writing nothing', async () => {
    const { mur, projectFile } = await place();
    for (const args of [
      ['set', 'nonsense.field', 'value'],
      ['get', 'inference.temperature'],
    ]) {
      const result = await mur(args);
      expect(result.code).toBe(1);
      expect(result.stderr).toContain(`error[E-CFG-002]: unsupported config key '${args[1]}'`);
      expect(result.stderr).toContain('supported keys: registry.default, registry.index_url, inference.provider');
    }
    await expect(fs.stat(projectFile)).rejects.toThrow();
  });

  it('refuses an empty value, and a file that does not parse, leaving the file as it was', async () => {
    const { mur, projectFile } = await place();
    const empty = await mur(['set', 'inference.model', ' ']);
    expect(empty.code).toBe(1);
    expect(empty.stderr).toContain("error[E-CFG-003]: the value for 'inference.model' is empty");
    await fs.mkdir(path.dirname(projectFile), { recursive: true });
    await fs.writeFile(projectFile, 'containment: [unclosed\n');
    const broken = await mur(['set', 'inference.model', 'm']);
    expect(broken.code).toBe(1);
    expect(broken.stderr).toContain(`error[E-CFG-003]: ${projectFile}`);
    expect(await fs.readFile(projectFile, 'utf8')).toBe('containment: [unclosed\n');
    expect((await fs.readdir(path.dirname(projectFile))).sort()).toEqual(['config.yaml']);
  });

  it('refuses a value holding a control character, and a URL key given something that is not an http(s) URL, writing nothing', async () => {
    const { mur, projectFile } = await place();
    const escaped = await mur(['set', 'inference.model', 'm\u001b]0;PWNED\u0007']);
    expect(escaped.code).toBe(1);
    expect(escaped.stderr).toContain("error[E-CFG-003]: the value for 'inference.model' holds a control character");
    // C1 as well: U+009B is a one-character CSI to a terminal that reads 8-bit controls.
    const eightBit = await mur(['set', 'inference.model', 'm\u009b2J']);
    expect(eightBit.code).toBe(1);
    expect(eightBit.stderr).toContain("error[E-CFG-003]: the value for 'inference.model' holds a control character");
    for (const [key, value] of [
      ['registry.index_url', 'ftp://example.com/index.json'],
      ['inference.endpoint', 'notaurl'],
      ['inference.endpoint', 'ftp://example.com/v1'],
    ] as const) {
      const refused = await mur(['set', key, value]);
      expect(refused.code, `${key} ${value}`).toBe(1);
      expect(refused.stderr).toContain(`error[E-CFG-003]: the value for '${key}' is not an http(s) URL`);
    }
    await expect(fs.stat(projectFile)).rejects.toThrow();
    expect((await mur(['set', 'inference.endpoint', 'http://127.0.0.1:8080/v1'])).code).toBe(0);
  });

  it('sets a key under a section left empty (its keys commented out), and refuses one that is a list, a scalar or an alias, writing nothing', async () => {
    const { mur, projectFile } = await place();
    await fs.mkdir(path.dirname(projectFile), { recursive: true });
    await fs.writeFile(projectFile, 'inference:\n# model: old\n');
    const set = await mur(['set', 'inference.model', 'm1']);
    expect(set.code, set.stderr).toBe(0);
    expect((await mur(['get', 'inference.model'])).stdout.trim()).toBe('m1');
    for (const [text, said] of [
      ['registry: [a]\n', "'registry' must be a mapping of keys to values (line 1)"],
      ['registry: foo\n', "'registry' must be a mapping of keys to values (line 1)"],
      ['inference:\n  model: [1, 2]\n', "'inference.model' must be a single value, not a list (line 2)"],
    ] as const) {
      await fs.writeFile(projectFile, text);
      for (const args of [
        ['set', 'registry.default', 'local'],
        ['get', 'registry.default'],
      ]) {
        const refused = await mur(args);
        expect(refused.code, `${args.join(' ')} on ${text}`).toBe(1);
        expect(refused.stderr).toContain(`error[E-CFG-003]: ${projectFile}: ${said}`);
        expect(refused.stderr).not.toContain('this is a bug');
      }
      expect(await fs.readFile(projectFile, 'utf8')).toBe(text);
    }
    const aliased = 'defaults: &d\n  default: official\nregistry: *d\n';
    await fs.writeFile(projectFile, aliased);
    const alias = await mur(['set', 'registry.default', 'local']);
    expect(alias.code).toBe(1);
    expect(alias.stderr).toContain(`error[E-CFG-003]: ${projectFile} holds a YAML anchor or alias (&d)`);
    expect(await fs.readFile(projectFile, 'utf8')).toBe(aliased);
    // A value anchored under one key and aliased under another: setting one would change both.
    const shared = 'registry:\n  index_url: &u https://index.example.com/index.json\ninference:\n  endpoint: *u\n';
    await fs.writeFile(projectFile, shared);
    const through = await mur(['set', 'registry.index_url', './local-index.json']);
    expect(through.code).toBe(1);
    expect(through.stderr).toContain(`error[E-CFG-003]: ${projectFile} holds a YAML anchor or alias (&u)`);
    expect(await fs.readFile(projectFile, 'utf8')).toBe(shared);
  });

  it('keeps every key of sets made at once, each taking its turn at the file', async () => {
    const { mur, globalFile } = await place();
    const keys = ['registry.default', 'registry.index_url', 'inference.provider', 'inference.model'];
    const sets = await Promise.all(keys.map((key) => mur(['set', '-g', key, key === 'registry.index_url' ? 'https://example.com/index.json' : 'v'])));
    for (const set of sets) expect(set.code, set.stderr).toBe(0);
    const text = await fs.readFile(globalFile, 'utf8');
    for (const key of keys) expect(text, key).toContain(`${key.split('.')[1]}: `);
  });

  it('refuses an endpoint or an index URL with credentials in it, never printing them, and says which keys it keeps but nothing reads', async () => {
    const { mur, projectFile } = await place();
    for (const [key, url] of [
      ['inference.endpoint', 'https://user:hunter2@api.example.com/v1'],
      ['registry.index_url', 'https://user:hunter2@example.com/index.json'],
      ['registry.index_url', 's3://AKIA:hunter2@bucket/index.json'],
      // What does not parse as a URL, a user and password before its host all the same.
      ['registry.index_url', 'http://u:hunter2@x.example:99999/i'],
      ['registry.index_url', 'https://u:hunter2@[bad/i.json'],
      ['inference.endpoint', 'http://u:hunter2@x:99999/'],
    ]) {
      const credentialed = await mur(['set', key as string, url as string]);
      expect(credentialed.code, url).toBe(1);
      expect(credentialed.stderr).toContain(`error[E-CFG-003]: the value for '${key}' carries credentials in its URL`);
      expect(credentialed.stderr).not.toContain('hunter2');
    }
    await expect(fs.stat(projectFile)).rejects.toThrow();
    const unread = await mur(['set', 'registry.default', 'remote']);
    expect(unread.code, unread.stderr).toBe(0);
    expect(unread.stderr).toContain('note: registry.default is kept in the configuration, but this runtime reads it nowhere');
    expect((await mur(['set', 'registry.index_url', 'https://example.com/index.json'])).stderr).not.toContain('note:');
  });

  it('refuses a configuration that is a link to nothing, where it was read as none and its containment floor dropped', async () => {
    const { home, project, mur, globalFile } = await place();
    await fs.mkdir(home, { recursive: true });
    await fs.symlink(path.join(home, 'not-mounted', 'config.yaml'), globalFile);
    const read = await mur(['get', 'registry.default']);
    expect(read.code).toBe(1);
    expect(read.stderr).toContain(`error[E-IO-002]: cannot read ${globalFile}: it is a link to`);
    const explained = await runMur(['run', '--explain-scope'], { cwd: project, env: { MURMUR_HOME: home } });
    expect(explained.code).toBe(1);
    expect(explained.stderr).toContain(`error[E-IO-002]: cannot read ${globalFile}: it is a link to`);
  });

  it('keeps the mode of the project file it edits, and writes a global file that is a link where the link leads, refusing a link to nothing', async () => {
    const { mur, home, projectFile, globalFile } = await place();
    await fs.mkdir(path.dirname(projectFile), { recursive: true });
    await fs.writeFile(projectFile, 'inference:\n  endpoint: https://user:pw@example.com/v1\n', { mode: 0o600 });
    await fs.chmod(projectFile, 0o600);
    expect((await mur(['set', 'inference.model', 'm1'])).code).toBe(0);
    expect((await fs.stat(projectFile)).mode & 0o777).toBe(0o600);
    const dotfile = path.join(home, '..', 'dotfiles', 'config.yaml');
    await fs.mkdir(path.dirname(dotfile), { recursive: true });
    await fs.writeFile(dotfile, 'registry:\n  default: official\n');
    await fs.mkdir(home, { recursive: true });
    await fs.symlink(dotfile, globalFile);
    expect((await mur(['set', '-g', 'inference.model', 'm2'])).code).toBe(0);
    expect((await fs.lstat(globalFile)).isSymbolicLink()).toBe(true);
    expect(await fs.readFile(dotfile, 'utf8')).toContain('model: m2');
    // A link to nothing (the dotfiles not checked out) is refused, and stays the link it was.
    await fs.rm(dotfile);
    const dangling = await mur(['set', '-g', 'inference.model', 'm3']);
    expect(dangling.code).toBe(1);
    expect(dangling.stderr).toContain(`error[E-IO-002]: cannot read ${globalFile}: it is a link to ${dotfile}, which does not exist`);
    expect(await fs.readlink(globalFile)).toBe(dotfile);
  });

  it('says what to do with a configuration that is a list, or a directory where its file should be', async () => {
    const { mur, projectFile } = await place();
    await fs.mkdir(path.dirname(projectFile), { recursive: true });
    await fs.writeFile(projectFile, '- containment\n- sealed\n');
    const listed = await mur(['get', 'inference.model']);
    expect(listed.code).toBe(1);
    expect(listed.stderr).toContain(`error[E-CFG-003]: ${projectFile}: the configuration must be a mapping of keys to values`);
    expect(listed.stderr).toContain("hint: write it as 'key: value' lines");
    await fs.rm(projectFile);
    await fs.mkdir(projectFile);
    const directory = await mur(['get', 'inference.model']);
    expect(directory.code).toBe(1);
    expect(directory.stderr).toContain(`error[E-IO-002]: cannot read ${projectFile}: EISDIR`);
    expect(directory.stderr).toContain(`hint: a configuration is a file: move the directory ${projectFile} out of the way`);
  });
});
