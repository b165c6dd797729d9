qr npm 'view @NP@@@NV@ version' npm view @NPM_FLAGS@ @NP@@@NV@ version
