// Certificates made by the tests with openssl: a CA, a server certificate for 127.0.0.1 and
// localhost, and client certificates with a chosen CN, signed by that CA or by a stranger's.
import { execFileSync } from 'node:child_process';
import path from 'node:path';
import { tempDir } from '../helpers/service.js';

export interface Pki {
  dir: string;
  caCert: string;
  serverCert: string;
  serverKey: string;
  /** A client certificate and key with subject CN `cn`, signed by the CA (or by another CA); `expired`: its validity ended a day ago. */
  client(cn: string, signedBy?: 'ca' | 'stranger', expired?: boolean): { cert: string; key: string };
}

const openssl = (dir: string, args: string[]) => execFileSync('openssl', args, { cwd: dir, stdio: 'pipe' });

function keyAndRequest(dir: string, name: string, subject: string): void {
  openssl(dir, ['req', '-newkey', 'rsa:2048', '-nodes', '-keyout', `${name}.key`, '-out', `${name}.csr`, '-subj', subject]);
}

function selfSigned(dir: string, name: string, subject: string): void {
  openssl(dir, [
    'req',
    '-x509',
    '-newkey',
    'rsa:2048',
    '-nodes',
    '-keyout',
    `${name}.key`,
    '-out',
    `${name}.pem`,
    '-days',
    '2',
    '-subj',
    subject,
  ]);
}

export async function makePki(): Promise<Pki> {
  const dir = await tempDir('dr-pki-');
  selfSigned(dir, 'ca', '/CN=device-registry test CA');
  selfSigned(dir, 'stranger', '/CN=someone else');
  keyAndRequest(dir, 'server', '/CN=localhost');
  const ext = path.join(dir, 'server.ext');
  execFileSync('sh', ['-c', `printf 'subjectAltName=DNS:localhost,IP:127.0.0.1\\n' > ${ext}`]);
  openssl(dir, [
    'x509',
    '-req',
    '-in',
    'server.csr',
    '-CA',
    'ca.pem',
    '-CAkey',
    'ca.key',
    '-CAcreateserial',
    '-out',
    'server.pem',
    '-days',
    '2',
    '-extfile',
    ext,
  ]);
  let n = 0;
  return {
    dir,
    caCert: path.join(dir, 'ca.pem'),
    serverCert: path.join(dir, 'server.pem'),
    serverKey: path.join(dir, 'server.key'),
    client(cn, signedBy = 'ca', expired = false) {
      const name = `client${++n}`;
      keyAndRequest(dir, name, `/CN=${cn}`);
      const issuer = signedBy === 'ca' ? 'ca' : 'stranger';
      openssl(dir, [
        'x509',
        '-req',
        '-in',
        `${name}.csr`,
        '-CA',
        `${issuer}.pem`,
        '-CAkey',
        `${issuer}.key`,
        '-CAcreateserial',
        '-out',
        `${name}.pem`,
        '-days',
        expired ? '-1' : '2',
      ]);
      return { cert: path.join(dir, `${name}.pem`), key: path.join(dir, `${name}.key`) };
    },
  };
}
