// Key material generated on first start and kept in DATA_DIR (mode 0600), used when the
// configuration does not provide it.
import crypto from 'node:crypto';
import fs from 'node:fs/promises';
import path from 'node:path';

/**
 * `mkdir -p`, one level at a time: Node's recursive mkdir never returns for a path inside
 * /proc (`/proc/nonexistent` loops on ENOENT), which would hang the start without a word.
 */
async function makeDirs(dir: string): Promise<void> {
  const isDir = (d: string) =>
    fs.stat(d).then(
      (st) => st.isDirectory(),
      () => false,
    );
  const parent = path.dirname(dir);
  if (parent !== dir && !(await isDir(parent))) await makeDirs(parent);
  try {
    await fs.mkdir(dir);
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code !== 'EEXIST' || !(await isDir(dir))) throw err;
  }
}

/** Creates DATA_DIR if needed; a path that cannot be a writable directory stops the start naming DATA_DIR. */
export async function prepareDataDir(dataDir: string): Promise<void> {
  try {
    await makeDirs(path.resolve(dataDir));
    await fs.access(dataDir, fs.constants.W_OK | fs.constants.X_OK);
  } catch (err) {
    throw new Error(`DATA_DIR ${dataDir} cannot be used as a writable directory: ${(err as Error).message}`);
  }
}

export async function loadOrCreateKey(dataDir: string, fileName: string, bytes = 32): Promise<Buffer> {
  const file = path.join(dataDir, fileName);
  try {
    const hex = (await fs.readFile(file, 'utf8')).trim();
    const key = Buffer.from(hex, 'hex');
    if (key.length !== bytes) throw new Error(`${file} must hold ${bytes} bytes as hex; remove it to generate a new key`);
    return key;
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code !== 'ENOENT') throw err;
  }
  await fs.mkdir(dataDir, { recursive: true });
  const key = crypto.randomBytes(bytes);
  // `wx`: two instances starting at once never overwrite each other's key.
  try {
    await fs.writeFile(file, key.toString('hex') + '\n', { mode: 0o600, flag: 'wx' });
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code === 'EEXIST') return loadOrCreateKey(dataDir, fileName, bytes);
    throw err;
  }
  return key;
}
